"""What researchers call on a `Point`: gradient and Hessian, Lanczos, spectra (SLQ, trace,
diagonal), eigenpairs, geometry (paths, slices), Gauss-Newton, and the compiled programs they
share; every result follows one protocol (docs/architecture.md)."""
