"""Label-free measures of how rich a representation is, beyond the paper's probes.

* RankMe (Garrido et al. 2023, arXiv 2210.02885): the exponential of the entropy of the normalised
  singular values, a smooth count of the directions a representation uses.
* alpha-ReQ (Agrawal et al. 2022, NeurIPS): the decay exponent of the covariance eigenspectrum,
  lambda_k ~ k^(-alpha); a smaller alpha means variance spread over more directions.
* Linear CKA (Kornblith et al. 2019, arXiv 1905.00414): similarity of two representations of the
  same inputs, invariant to rotations and isotropic scaling. Low CKA between the members of a
  concatenation means they learned different features.
"""

from __future__ import annotations

import torch


def _centred(features: torch.Tensor) -> torch.Tensor:
    features = features.to(torch.float64)
    return features - features.mean(0, keepdim=True)


def rankme(features: torch.Tensor, eps: float = 1e-7) -> float:
    singular = torch.linalg.svdvals(features.to(torch.float64))
    p = singular / singular.sum() + eps
    return float(torch.exp(-(p * p.log()).sum()))


def alpha_req(features: torch.Tensor, fit_range: tuple[float, float] = (0.0, 0.9)) -> float:
    """Least-squares slope of log eigenvalue against log rank, over a fraction of the ranks
    (the tail of a finite sample's spectrum is noise)."""
    eigen = torch.linalg.svdvals(_centred(features)).square()
    eigen = eigen[eigen > eigen[0] * 1e-12]
    start = int(fit_range[0] * len(eigen))
    stop = max(start + 2, int(fit_range[1] * len(eigen)))
    ranks = torch.arange(1, len(eigen) + 1, dtype=torch.float64)[start:stop].log()
    values = eigen[start:stop].log()
    ranks_c = ranks - ranks.mean()
    slope = (ranks_c * (values - values.mean())).sum() / ranks_c.square().sum()
    return float(-slope)


def linear_cka(first: torch.Tensor, second: torch.Tensor) -> float:
    if first.shape[0] != second.shape[0]:
        raise ValueError(f"CKA needs the same inputs: {first.shape[0]} vs {second.shape[0]} rows")
    x, y = _centred(first), _centred(second)
    cross = (y.T @ x).square().sum()
    return float(cross / ((x.T @ x).square().sum().sqrt() * (y.T @ y).square().sum().sqrt()))
