"""The Krylov core beneath the probes, the tracker and the engine: the flat layout of a point's
parameters over its devices, and the pieces every matrix-free probe shares. It imports neither the
engine nor the probes (docs/architecture.md, "Layers")."""
