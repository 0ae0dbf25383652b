"""kvcheck from Python: exact oracles, derived error bounds and llama.cpp-style KL metrics.

Every function checks its arrays (float32, C-contiguous, on the CPU; numpy or torch CPU tensors
through DLPack) and raises TypeError or ValueError naming the argument and what was expected;
nothing is copied or converted to fit. The numbers come from kvcheck's C++ library: quantizers
(kernels/), bounds and oracles (oracles/), metrics and the report gate (cli/report_baseline).
Documentation: docs/python.md.
"""

from ._kvcheck import (  # noqa: F401
    PageManagerModel,
    Quantized,
    StepCheck,
    attention,
    bound,
    compare_logits,
    dequantize,
    kl_divergence,
    quantize,
    topk_agreement,
)
from ._kvcheck import gate as _gate
from ._kvcheck import check_decode_step as _check_decode_step
from ._kvcheck import _check_quantized

__all__ = [
    "BoundViolation", "OracleViolation", "PageManagerModel", "Quantized", "ReferenceModel", "StepCheck",
    "attention", "bound", "check_decode_step", "check_quantized", "compare_logits", "dequantize", "gate",
    "kl_divergence", "quantize", "topk_agreement",
]


class BoundViolation(AssertionError):
    """An element of x_hat outside kvcheck's bound: .index, .x, .x_hat, .error, .bound, .format."""

    def __init__(self, report):
        self.__dict__.update(report)
        super().__init__(
            f"x_hat{list(report['index'])}: |x - x_hat| = {report['error']:.9g} > bound {report['bound']:.9g} "
            f"of {report['format']} (x = {report['x']:.9g}, x_hat = {report['x_hat']:.9g}, kvcheck's x_hat = "
            f"{report['kvcheck_x_hat']:.9g}{', ' + report['metadata'] if report['metadata'] else ''}; "
            f"{report['share_of_bound']:.3g} x the bound)")


class OracleViolation(AssertionError):
    """A decode step the per-step oracle rejects; .check is the StepCheck."""

    def __init__(self, check):
        self.check = check
        which = "held-set" if not check.held_ok else "full-context"
        h, c = check.worst_element
        super().__init__(
            f"per-step oracle: {which} check failed, worst query head {h}: output[{h}, {c}] = "
            f"{check.worst_output:.9g}, exact attention over the {check.worst_against} {check.worst_expected:.9g} "
            f"(off by {abs(check.worst_output - check.worst_expected):.3e}); {check!r}")


def check_quantized(x, x_hat, format):
    """Raise BoundViolation unless every |x - x_hat| is within the bound of `format`.

    The bound is kvcheck's (docs/design.md §4), from the metadata kvcheck's own quantizer stores
    for x: for INT formats scale/2 plus float slack, for FP8 E4M3 2^-4 |x| + 2^-10 scale plus
    slack, for fp16/fp32 the error of exact rounding. The exception names the worst element (the
    largest share of its bound), its index, its bound and the metadata. Returns the report dict
    (worst element, share_of_bound) when every element holds.
    """
    report = _check_quantized(x, x_hat, format)
    if not report["ok"]:
        raise BoundViolation(report)
    return report


def check_decode_step(q, keys, values, held, output, *, key_format=None, value_format=None, held_keys=None,
                      held_values=None, scale=None, raise_on_violation=True):
    """The per-step oracle (docs/design.md §7) for one kv head's decode step.

    q [group, head_dim] (or [head_dim]); keys, values [n, head_dim]: every token, exact; held: the
    ascending indices of the tokens the cache holds; output: the engine's attention output, shaped
    as q. What the cache held is either derived (key_format / value_format: the held rows as that
    format stores them, e.g. "int4/token") or given (held_keys / held_values [len(held), head_dim],
    dequantized). Returns a StepCheck (ok, worst_head, errors and bounds); raises OracleViolation
    when it fails unless raise_on_violation is False.
    """
    check = _check_decode_step(q, keys, values, held, output, key_format, value_format, held_keys, held_values,
                               scale)
    if raise_on_violation and not check.ok:
        raise OracleViolation(check)
    return check


def gate(ref_logits, logits, targets, *, baseline_kl_mean, baseline_perplexity_ratio, kl_rel=0.05, kl_abs=1e-7,
         ppl_rel=0.005):
    """The report gate's verdict (kvcheck report --baseline) on logits against ref_logits.

    Computes the metrics of compare_logits, then holds KL mean and perplexity ratio to a baseline
    with the report's tolerances: regressed when kl > base (1 + kl_rel) + kl_abs or ratio >
    base (1 + ppl_rel). Returns the metrics with "passed", "regressions" and "table".
    """
    return _gate(ref_logits, logits, targets, baseline_kl_mean, baseline_perplexity_ratio, kl_rel, kl_abs, ppl_rel)


def __getattr__(name):
    if name == "ReferenceModel":
        from ._model import ReferenceModel
        return ReferenceModel
    raise AttributeError(f"module 'kvcheck' has no attribute {name!r}")
