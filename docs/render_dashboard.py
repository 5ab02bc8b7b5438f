"""Draw docs/images/harel-dashboard.png from the dashboard JSON: the panels where Grafana puts them (gridPos),
with their titles, units and legends, filled with synthetic series. It shows the layout and what each panel
plots; it is a drawing made without Grafana, not a screenshot of one, and the numbers in it are made up.

    pip install pillow
    python docs/render_dashboard.py      # writes docs/images/harel-dashboard.png
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

REPOSITORY = Path(__file__).resolve().parents[1]
DASHBOARD = REPOSITORY / "helm" / "harel-stack" / "files" / "observability" / "harel-dashboard.json"
OUTPUT = REPOSITORY / "docs" / "images" / "harel-dashboard.png"

COLUMN = 64  # pixels per grid column (Grafana has 24)
ROW = 34  # pixels per grid row
MARGIN = 16
HEADER = 64
BACKGROUND = (17, 18, 23)
PANEL = (24, 27, 31)
BORDER = (44, 48, 54)
TEXT = (204, 204, 220)
MUTED = (142, 142, 160)
SERIES = [(115, 191, 105), (242, 204, 12), (87, 148, 242), (255, 120, 10), (184, 119, 217), (242, 73, 92)]
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.truetype(str(FONT), size) if FONT.exists() else ImageFont.load_default(size)


def legend(target: dict[str, Any], index: int) -> str:
    text = target.get("legendFormat") or target["expr"]
    samples = {
        "kind": ["start", "timer", "done", "user"],
        "status": ["running", "completed"],
        "type": ["query", "insert", "update"],
        "event": ["moveChunk.commit", "moveChunk.start"],
        "shard": ["sh1", "sh2"],
    }
    return re.sub(
        r"\{\{\s*(\w+)\s*\}\}",
        lambda m: samples.get(m.group(1), [f"{m.group(1)}-1", f"{m.group(1)}-2"])[index % 2],
        text,
    )


def series(rng: random.Random, points: int) -> list[float]:
    level = rng.uniform(0.2, 0.8)
    wave = rng.uniform(0.03, 0.15)
    phase = rng.uniform(0, math.tau)
    return [
        max(0.02, min(0.98, level + wave * math.sin(phase + i / 6) + rng.uniform(-0.03, 0.03)))
        for i in range(points)
    ]


def stat_value(panel: dict[str, Any], rng: random.Random) -> str:
    unit = panel["fieldConfig"]["defaults"].get("unit", "")
    if "oplog" in panel["title"].lower():
        return f"{rng.uniform(40, 60):.1f} hour"
    if unit == "s":
        return f"{rng.uniform(0.1, 2.0):.2f} s"
    if unit == "dateTimeFromNow":
        return "3 hours ago"
    title = panel["title"].lower()
    if "version" in title:
        return "8.0.4"
    if "ready" in title or "members" in title:
        return "3"
    if "primar" in title:
        return "1"
    if "parked" in title or "unserved" in title:
        return "0"
    # The sharded row: two routers and two shards, the balancer on and idle, nothing down or draining.
    if "down" in title or "draining" in title or "running" in title:
        return "0"
    if "routers" in title or title == "shards":
        return "2"
    if "enabled" in title:
        return "1"
    return str(rng.randint(2, 40))


def draw_panel(draw: ImageDraw.ImageDraw, panel: dict[str, Any], rng: random.Random) -> None:
    grid = panel["gridPos"]
    left = MARGIN + grid["x"] * COLUMN
    top = HEADER + grid["y"] * ROW
    right = left + grid["w"] * COLUMN - 6
    bottom = top + grid["h"] * ROW - 6
    if panel["type"] == "row":
        draw.text((left, top + 6), panel["title"], fill=TEXT, font=font(17))
        return
    draw.rounded_rectangle((left, top, right, bottom), radius=4, fill=PANEL, outline=BORDER)
    draw.text((left + 10, top + 8), panel["title"], fill=TEXT, font=font(13))
    body = (left + 10, top + 32, right - 10, bottom - 10)
    if panel["type"] == "stat":
        value = stat_value(panel, rng)
        size = font(30)
        width = draw.textlength(value, font=size)
        draw.text(((body[0] + body[2] - width) / 2, body[1] + 14), value, fill=SERIES[0], font=size)
        return
    targets = panel["targets"]
    legends = [legend(target, i) for i, target in enumerate(targets)]
    plot_bottom = body[3] - 18 * math.ceil(len(legends) / 3)
    for level in range(4):
        y = body[1] + (plot_bottom - body[1]) * level / 3
        draw.line((body[0], y, body[2], y), fill=BORDER)
    points = 48
    for i, _ in enumerate(legends):
        values = series(rng, points)
        xy = [
            (body[0] + (body[2] - body[0]) * n / (points - 1), plot_bottom - (plot_bottom - body[1]) * value)
            for n, value in enumerate(values)
        ]
        draw.line(xy, fill=SERIES[i % len(SERIES)], width=2)
    for i, text in enumerate(legends):
        x = body[0] + (i % 3) * (body[2] - body[0]) / 3
        y = plot_bottom + 4 + 18 * (i // 3)
        draw.rectangle((x, y + 5, x + 10, y + 9), fill=SERIES[i % len(SERIES)])
        draw.text((x + 14, y), text[:40], fill=MUTED, font=font(11))


def main() -> None:
    board = json.loads(DASHBOARD.read_text())
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"])
    image = Image.new("RGB", (MARGIN * 2 + 24 * COLUMN, HEADER + height * ROW + MARGIN), BACKGROUND)
    draw = ImageDraw.Draw(image)
    draw.text((MARGIN, 14), board["title"], fill=TEXT, font=font(20))
    draw.text(
        (MARGIN, 40),
        "drawn from harel-dashboard.json with synthetic data (docs/render_dashboard.py), not a Grafana screenshot",
        fill=MUTED,
        font=font(12),
    )
    rng = random.Random(17)
    for panel in board["panels"]:
        draw_panel(draw, panel, rng)
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    image.save(OUTPUT, optimize=True)
    print(f"wrote {OUTPUT.relative_to(REPOSITORY)} ({image.width}x{image.height})")


if __name__ == "__main__":
    main()
