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

# Issue 76: a table cell no one can reach. For each cell (td, th) shown: the page itself
# does not scroll sideways, so the cell must lie within the window's width, or an ancestor
# that scrolls sideways (overflow-x auto or scroll) must hold it within its scrollWidth, that
# box in turn within the window or another such box. An ancestor that clips (overflow-x
# hidden or clip) with the cell outside its box: unreachable.
UNREACHABLE = """() => {
  const out = [];
  const view = document.documentElement.clientWidth;
  for (const cell of document.querySelectorAll('td, th')) {
    const r = cell.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    let left = r.left, right = r.right, why = '';
    for (let a = cell.parentElement; a && a !== document.documentElement; a = a.parentElement) {
      const ov = getComputedStyle(a).overflowX;
      if (ov === 'visible') continue;
      const b = a.getBoundingClientRect();
      if (left >= b.left - 1 && right <= b.right + 1) continue;
      if (ov === 'auto' || ov === 'scroll') {
        const origin = b.left + a.clientLeft - a.scrollLeft;
        if (left >= origin - 1 && right <= origin + a.scrollWidth + 1) {
          left = b.left; right = Math.min(b.right, b.left + (r.right - r.left)); continue;
        }
        why = 'beyond the scroll width of ' + (a.id || a.className); break;
      }
      why = 'clipped by ' + (a.id || a.className || a.tagName); break;
    }
    if (!why && (left < -1 || right > view + 1)) why = 'outside the window';
    if (why) {
      const table = cell.closest("[id^='gm-']");
      out.push([table ? table.id : '', cell.textContent.trim().slice(0, 30), Math.round(r.left), Math.round(r.right), why]);
    }
  }
  return out;
}"""

# Issue 76: a control's label squeezed ("Also: copying alone" drawn as "Als / cop / alc"): the
# first word of each label, button, title or hint shown, broken over lines, wider than the box
# it is laid out in, or cut by an ancestor that clips or scrolls (a label is not scrolled to).
SQUEEZED_LABELS = """() => {
  const out = [];
  const sel = "label, button, [data-testid='block-info'], [data-testid='block-label']";
  for (const host of document.querySelectorAll(sel)) {
    if (!host.offsetParent || host.closest("[aria-hidden='true']")) continue;  // not shown to a reader
    const walker = document.createTreeWalker(host, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      const m = /\\S+/.exec(node.textContent);
      if (!m) continue;
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const rects = [...range.getClientRects()].filter(q => q.width > 0);
      if (!rects.length) break;
      let box = node.parentElement;
      while (box && getComputedStyle(box).display.startsWith('inline')) box = box.parentElement;
      const b = box.getBoundingClientRect();
      const cs = getComputedStyle(box);
      const inner = b.right - parseFloat(cs.paddingRight) - parseFloat(cs.borderRightWidth);
      const word = range.getBoundingClientRect();
      let cut = false;
      for (let a = box; a && a !== document.body; a = a.parentElement) {
        if (getComputedStyle(a).overflowX === 'visible') continue;
        const c = a.getBoundingClientRect();
        if (word.left < c.left + a.clientLeft - 1 || word.right > c.left + a.clientLeft + a.clientWidth + 1) cut = true;
      }
      if (rects.length > 1 || word.right > inner + 1 || cut)
        out.push([host.id || (host.closest('[id]') || {}).id || '', node.textContent.trim().slice(0, 40),
                  Math.round(b.width), Math.round(word.width), rects.length]);
      break;  // the first word of the host's first text
    }
  }
  return out;
}"""


def unreachable_cells(page) -> list:
    """The table cells shown that no scroll can bring into view (empty: none)."""
    return page.evaluate(UNREACHABLE)


def squeezed_labels(page) -> list:
    """The labels shown whose first word does not fit their box (empty: none)."""
    return page.evaluate(SQUEEZED_LABELS)
