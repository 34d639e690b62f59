"""What a page must not do at any width the browser tests cover, down to a phone's 390 px:
scroll sideways, squeeze text into a column a word wide, or draw a plot's label
outside its plot. Each check returns what it found (empty: nothing), for the tests'
assertions and for a person looking at a page."""

# The page scrolls sideways when its content is wider than the window.
SIDEWAYS = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"

# Text squeezed into a column: an element whose own text (not its children's) holds 40 or
# more characters, laid out narrower than 100 px and taller than 150 px.
SQUEEZED = """() => {
  const out = [];
  for (const el of document.querySelectorAll('body *')) {
    const own = [...el.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('').trim();
    if (own.length < 40) continue;
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.width < 100 && r.height > 150) out.push([own.slice(0, 60), Math.round(r.width), Math.round(r.height)]);
  }
  return out;
}"""

# A plot's text outside its plot: every text of each plot's SVG (titles, axis titles, ticks,
# legend, annotations) inside the box of the plot's own SVG (a pixel of slack).
OUTSIDE = """(sel) => {
  const out = [];
  for (const plot of document.querySelectorAll(sel)) {
    const svg = plot.querySelector('.main-svg');
    if (!svg) continue;
    const box = svg.getBoundingClientRect();
    for (const t of plot.querySelectorAll('.main-svg text, .infolayer text')) {
      if (!t.textContent.trim()) continue;
      const r = t.getBoundingClientRect();
      if (r.width === 0) continue;
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
        out.push([plot.id, t.textContent.slice(0, 40), Math.round(r.left - box.left), Math.round(box.right - r.right)]);
    }
  }
  return out;
}"""


def sideways(page) -> int:
    """How many pixels the page scrolls sideways (0: none)."""
    return page.evaluate(SIDEWAYS)


def squeezed(page) -> list:
    return page.evaluate(SQUEEZED)


def outside_plots(page, selector: str = ".js-plotly-plot") -> list:
    return page.evaluate(OUTSIDE, selector)
