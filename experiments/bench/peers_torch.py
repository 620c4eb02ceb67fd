"""The torch peers of the peers benchmark (`peers_timing.py`): PyHessian and curvlinops on the
MLP of `peers_data.py` in PyTorch, each probe as the peer offers it, with its products counted.
Nothing here imports JAX: a peer's process holds its own stack alone."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from experiments.bench import peers_data


def torch_mlp(arrays: dict[str, np.ndarray], device: str = "cpu") -> tuple[Any, Any, Any, Any]:
    """(model, criterion, x, y) in PyTorch with the same arrays: nn.Sequential of Linear and
    Tanh, nn.CrossEntropyLoss (mean), float32, on `device`."""
    import torch

    hidden = arrays["w2"].shape[0]
    layers = [
        torch.nn.Linear(peers_data.IN, hidden),
        torch.nn.Linear(hidden, hidden),
        torch.nn.Linear(hidden, peers_data.OUT),
    ]
    with torch.no_grad():
        for i, layer in enumerate(layers, 1):
            layer.weight.copy_(torch.from_numpy(arrays[f"w{i}"].T.copy()))
            layer.bias.copy_(torch.from_numpy(arrays[f"b{i}"]))
    model = torch.nn.Sequential(layers[0], torch.nn.Tanh(), layers[1], torch.nn.Tanh(), layers[2])
    x = torch.from_numpy(arrays["x"]).to(device)
    y = torch.from_numpy(arrays["y"].astype(np.int64)).to(device)
    return model.to(device), torch.nn.CrossEntropyLoss(), x, y


class _Torch:
    """What the two torch peers share: the model on its device, the directions, HVP counts."""

    def __init__(self, size: str, device: str, data: str | None = None) -> None:
        import torch

        self.torch, self.device = torch, device
        arrays = peers_data.load(size, data)
        self.model, self.criterion, self.x, self.y = torch_mlp(arrays, device)
        self.directions = [
            [
                torch.from_numpy(a).to(device)
                for a in peers_data.torch_layout(peers_data.direction(arrays, s))
            ]
            for s in range(1, 7)
        ]
        self.dim = sum(p.numel() for p in self.model.parameters())
        self.hvps = 0

    def device_peak_mb(self) -> float | None:
        if self.device != "cuda":
            return None
        return round(self.torch.cuda.max_memory_allocated() / 2**20, 1)


class PyHessian(_Torch):
    """pyhessian.hessian on one batch (its gradient graph kept for all products)."""

    def setup(self) -> None:
        import pyhessian

        module = sys.modules["pyhessian.hessian"]
        if not hasattr(module, "_counted"):
            product = module.hessian_vector_product

            def counted(*args: Any) -> Any:
                self.hvps += 1
                return product(*args)

            setattr(module, "hessian_vector_product", counted)  # noqa: B010  # mypy: no stubs
            setattr(module, "_counted", True)  # noqa: B010  # the same
        # density() calls torch.eig, which torch 2 keeps only as a stub that raises
        setattr(self.torch, "eig", _eig)  # noqa: B010  # torch's stubs lack eig: mypy
        self.h = pyhessian.hessian(
            self.model, self.criterion, data=(self.x, self.y), cuda=self.device == "cuda"
        )

    def run(self, probe: str, i: int = 0) -> dict[str, Any]:
        from pyhessian.utils import group_product, hessian_vector_product

        h, start = self.h, self.hvps
        if probe == "hvp":
            hv = hessian_vector_product(h.gradsH, h.params, self.directions[i])
            return {"vHv": float(group_product(hv, self.directions[i]))}
        if probe in ("top1", "top5"):
            values, self.vectors = h.eigenvalues(top_n=int(probe[3]))
            return {"values": [float(v) for v in values], "num_hvps": self.hvps - start}
        if probe == "trace":
            samples = h.trace(maxIter=100, tol=0.0)  # tol 0: all 100 probes, as ours
            stderr = float(np.std(samples, ddof=1) / np.sqrt(len(samples)))
            return {"trace": float(np.mean(samples)), "stderr": stderr}
        if probe == "slq":
            nodes, weights = h.density(iter=30, n_v=8)
            return peers_data.slq_answer(self.dim, nodes, weights)
        if probe == "stream_trace":  # its data-loader mode: the batches' graphs made per product
            samples = self._streamed().trace(maxIter=100, tol=0.0)
            stderr = float(np.std(samples, ddof=1) / np.sqrt(len(samples)))
            return {"trace": float(np.mean(samples)), "stderr": stderr}
        if probe == "stream_top5":
            values, self.vectors = self._streamed().eigenvalues(top_n=5)
            return {"values": [float(v) for v in values], "num_hvps": self.hvps - start}
        raise ValueError(f"PyHessian has no probe {probe}")

    def _streamed(self) -> Any:
        """pyhessian.hessian in its data-loader mode over the batches, its products counted."""
        import pyhessian

        loader = list(
            zip(
                self.x.chunk(peers_data.STREAMED_BATCHES),
                self.y.chunk(peers_data.STREAMED_BATCHES),
                strict=True,
            )
        )
        streamed = pyhessian.hessian(
            self.model, self.criterion, dataloader=loader, cuda=self.device == "cuda"
        )
        product = streamed.dataloader_hv_product

        def counted(*args: Any) -> Any:
            self.hvps += 1
            return product(*args)

        streamed.dataloader_hv_product = counted
        return streamed

    def check(self, probe: str, answer: dict[str, Any]) -> dict[str, Any]:
        """The residuals ||H v - λ v|| of PyHessian's eigenpairs (after the timing)."""
        if not probe.startswith("top"):
            return {}
        from pyhessian.utils import group_product, hessian_vector_product, normalization

        residuals = []
        for value, vector in zip(answer["values"], self.vectors, strict=True):
            v = normalization(vector)
            hv = hessian_vector_product(self.h.gradsH, self.h.params, v)
            r = [a - value * b for a, b in zip(hv, v, strict=True)]
            residuals.append(float(group_product(r, r)) ** 0.5)
        return peers_data.eigen_answer(answer["values"], residuals, num_hvps=answer["num_hvps"])


def _eig(matrix: Any, eigenvectors: bool = False) -> tuple[Any, Any]:
    """torch.eig's old result for a symmetric matrix: eigenvalues as (n, 2) real and imaginary
    parts, eigenvectors as columns (PyHessian's SLQ reads both)."""
    import torch

    values, vectors = torch.linalg.eigh(matrix)
    return torch.stack([values, torch.zeros_like(values)], dim=1), vectors


class Curvlinops(_Torch):
    """curvlinops' HessianLinearOperator; eigenvalues by scipy's eigsh (ARPACK) on it."""

    def setup(self) -> None:
        import curvlinops

        params = [p for p in self.model.parameters() if p.requires_grad]
        self.op = curvlinops.HessianLinearOperator(
            self.model, self.criterion, params, [(self.x, self.y)], check_deterministic=False
        )
        self.ggn = curvlinops.GGNLinearOperator(
            self.model, self.criterion, params, [(self.x, self.y)], check_deterministic=False
        )
        batches = zip(
            self.x.chunk(peers_data.STREAMED_BATCHES),
            self.y.chunk(peers_data.STREAMED_BATCHES),
            strict=True,
        )
        self.streamed = curvlinops.HessianLinearOperator(
            self.model, self.criterion, params, list(batches), check_deterministic=False
        )

    def _flat(self, leaves: list[Any]) -> Any:
        return self.torch.cat([a.reshape(-1) for a in leaves])

    def run(self, probe: str, i: int = 0) -> dict[str, Any]:
        import curvlinops

        if probe == "hvp":
            v = self._flat(self.directions[i])
            return {"vHv": float(v @ (self.op @ v))}
        if probe in ("top1", "top5", "ggn_top5", "stream_top5"):
            from scipy.sparse.linalg import LinearOperator, eigsh  # type: ignore[import-untyped]  # no stubs

            chosen = {"ggn_top5": self.ggn, "stream_top5": self.streamed}
            self.checked = chosen.get(probe, self.op)
            scipy_op = self.checked.to_scipy()

            def matvec(v: np.ndarray) -> np.ndarray:
                self.hvps += 1  # ARPACK hands float64 vectors to a float32 operator
                return scipy_op @ v.astype(scipy_op.dtype)

            start = self.hvps
            counted = LinearOperator(scipy_op.shape, matvec=matvec, dtype=scipy_op.dtype)
            values, self.vectors = eigsh(counted, k=int(probe[-1]), which="LA")
            order = np.argsort(values)[::-1]
            self.vectors = self.vectors[:, order]
            return {"values": values[order].tolist(), "num_hvps": self.hvps - start}
        if probe in ("trace", "ggn_trace", "stream_trace"):
            op = {"trace": self.op, "ggn_trace": self.ggn, "stream_trace": self.streamed}[probe]
            return {"trace": float(curvlinops.hutchinson_trace(op, 100))}
        raise ValueError(f"curvlinops is not asked for {probe}")

    def check(self, probe: str, answer: dict[str, Any]) -> dict[str, Any]:
        if "top" not in probe:
            return {}
        residuals = []
        for value, vector in zip(answer["values"], self.vectors.T, strict=True):
            v = self.torch.from_numpy(np.ascontiguousarray(vector, np.float32)).to(self.device)
            residuals.append(float(self.torch.linalg.norm(self.checked @ v - value * v)))
        return peers_data.eigen_answer(answer["values"], residuals, num_hvps=answer["num_hvps"])
