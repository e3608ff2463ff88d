"""Shared test tools: a scripted random stream and a goodness-of-fit statistic."""
import numpy as np


class ScriptedRng:
    """Stands in for np.random.Generator: hands out the given uniforms in order.

    Drawing one more than scripted fails the test, so an implementation that
    draws extra randomness (or keeps going after a rejection) is caught.
    """

    def __init__(self, uniforms):
        self.uniforms = list(uniforms)

    def random(self):
        assert self.uniforms, "drew more uniforms than the round should need"
        return self.uniforms.pop(0)


def chi2_excess(counts, probs, min_expected=5.0):
    """Pearson chi-square of counts against probs, in standard deviations above its mean.

    Cells expected fewer than min_expected times are pooled into one cell, and
    a count in a cell of probability 0 is an infinite misfit. Under the null
    hypothesis the result is about N(0, 1); a value of 6 is a p-value near 1e-6.
    """
    counts, probs = np.ravel(counts).astype(float), np.ravel(probs)
    if counts[probs == 0].sum() > 0:
        return np.inf
    n = counts.sum()
    big = n * probs >= min_expected
    obs = np.r_[counts[big], counts[~big].sum()]
    exp = np.r_[n * probs[big], n * probs[~big].sum()]
    keep = exp > 0
    stat = ((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()
    dof = keep.sum() - 1
    return (stat - dof) / np.sqrt(2 * dof)
