"""``rgb_array`` frames of one trading episode, drawn with NumPy alone (no display needed).

The frame has two panels over the episode's bars so far: the close price on a background
shaded by the position held (green long, red short, white flat), and the portfolio value
relative to the initial capital (blue) with the 1.0 line (grey).
"""

from __future__ import annotations

import numpy as np

LONG_RGB = np.array([214, 240, 214], dtype=np.uint8)
SHORT_RGB = np.array([245, 214, 214], dtype=np.uint8)
PRICE_RGB = np.array([40, 40, 40], dtype=np.uint8)
VALUE_RGB = np.array([31, 119, 180], dtype=np.uint8)
GUIDE_RGB = np.array([170, 170, 170], dtype=np.uint8)


def _rows(series: np.ndarray, top: int, height: int, lo: float, hi: float) -> np.ndarray:
    span = hi - lo if hi > lo else 1.0
    frac = (series - lo) / span
    return top + height - 1 - np.clip(np.round(frac * (height - 1)), 0, height - 1).astype(np.int64)


def _line(img: np.ndarray, xs: np.ndarray, ys: np.ndarray, rgb: np.ndarray) -> None:
    """Vertical segments between consecutive points, so steep moves stay connected."""
    img[ys, xs] = rgb
    for x0, y0, y1 in zip(xs[1:], ys[:-1], ys[1:], strict=True):
        a, b = (y0, y1) if y0 <= y1 else (y1, y0)
        img[a : b + 1, x0] = rgb


def render_episode(
    prices: np.ndarray,
    values: np.ndarray,
    positions: np.ndarray,
    width: int = 480,
    height: int = 320,
) -> np.ndarray:
    """uint8 [height, width, 3] frame of an episode.

    :param prices: close of each bar so far, float [n].
    :param values: portfolio value / initial capital after each bar, float [n].
    :param positions: units held after each bar's trade, float [n] (sign is what is drawn).
    """
    img = np.full((height, width, 3), 255, dtype=np.uint8)
    n = len(prices)
    if n == 0:
        return img
    xs = np.round(np.linspace(0, width - 1, n) if n > 1 else np.zeros(1)).astype(np.int64)
    split = int(height * 0.62)
    # Position shading: each bar's column range in the top panel.
    edges = np.append(xs, width)
    for k in range(n):
        if positions[k] > 0:
            img[:split, edges[k] : max(edges[k + 1], edges[k] + 1)] = LONG_RGB
        elif positions[k] < 0:
            img[:split, edges[k] : max(edges[k + 1], edges[k] + 1)] = SHORT_RGB
    # Series are interpolated to every pixel column between the first and last bar.
    cols = np.arange(xs[0], xs[-1] + 1)
    prices = np.interp(cols, xs, np.asarray(prices, dtype=np.float64))
    _line(img, cols, _rows(prices, 4, split - 8, prices.min(), prices.max()), PRICE_RGB)
    img[split, :] = GUIDE_RGB
    values = np.interp(cols, xs, np.asarray(values, dtype=np.float64))
    lo, hi = min(values.min(), 1.0), max(values.max(), 1.0)
    bottom_top, bottom_h = split + 4, height - split - 8
    img[_rows(np.array([1.0]), bottom_top, bottom_h, lo, hi)[0], :] = GUIDE_RGB
    _line(img, cols, _rows(values, bottom_top, bottom_h, lo, hi), VALUE_RGB)
    return img
