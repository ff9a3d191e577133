// memtrace-report flamegraph: the SVG flame graph's script (Note [Interactive SVG flame
// graph] in render_flame.cpp). Click a frame to zoom to it (again, or "Reset zoom", to zoom
// out); type in the search box to highlight the frames whose name holds the text and see
// the share of the bytes they hold; "hide library frames" gives each stack's bytes to its
// nearest frame outside the libraries, merging the stacks that meet there, as the HTML
// page does. Names are read from attributes and written with textContent only.
'use strict';

(function () {
  const svg = document.documentElement;
  const width = Number(svg.getAttribute('width'));
  const charWidth = 7;  // of the 12 px monospace labels, as render_flame.cpp counts
  const matchColor = 'rgb(230,0,230)';

  // The frames as drawn by render_flame.cpp, parents before children.
  const frames = new Map();
  for (const g of svg.querySelectorAll('g.frame')) {
    const rect = g.querySelector('rect');
    const frame = {
      g, rect, text: g.querySelector('text'), title: g.querySelector('title'),
      parent: frames.get(g.getAttribute('data-parent')) || null,
      bytes: Number(g.getAttribute('data-bytes')),
      name: g.getAttribute('data-name'),
      label: g.getAttribute('data-label'),
      library: g.hasAttribute('data-library'),
      fill: rect.getAttribute('fill'),
      y: Number(rect.getAttribute('y')),
      children: [],
    };
    frame.originalTitle = frame.title.textContent;
    if (frame.parent) frame.parent.children.push(frame);
    frames.set(g.getAttribute('data-id'), frame);
  }
  const rootFrame = frames.get('0');
  if (!rootFrame) return;
  const total = rootFrame.bytes;
  const top = rootFrame.y;
  const rowHeight = Number(rootFrame.rect.getAttribute('height')) + 1;

  // The tree shown: nodes of one or more frames (several when hiding library frames merges
  // stacks); each node is drawn by its first frame's <g>.
  function tree(hideLibrary) {
    const node = (frame, parent) =>
      ({frames: [frame], name: frame.name, parent, self: 0, bytes: 0, children: new Map()});
    const root = node(rootFrame, null);
    const walk = (frame, into) => {
      let at = into;
      if (frame !== rootFrame && !(hideLibrary && frame.library)) {
        at = into.children.get(frame.name);
        if (at) at.frames.push(frame);
        else into.children.set(frame.name, at = node(frame, into));
      }
      at.self += frame.bytes - frame.children.reduce((sum, child) => sum + child.bytes, 0);
      for (const child of frame.children) walk(child, at);
    };
    walk(rootFrame, root);
    const place = (n, x, depth) => {
      n.list = [...n.children.values()];
      n.bytes = n.self + n.list.reduce((sum, child) => sum + place(child, 0, depth + 1), 0);
      n.list.sort((a, b) => b.bytes - a.bytes);
      n.depth = depth;
      return n.bytes;
    };
    place(root, 0, 0);
    const position = (n, x) => {
      n.x = x;
      n.w = total ? (width * n.bytes) / total : 0;
      let at = x;
      for (const child of n.list) {
        position(child, at);
        at += child.w;
      }
    };
    position(root, 0);
    return root;
  }

  function fit(label, w) {
    const room = Math.floor((w - 6) / charWidth);
    if (room < 3) return '';
    return label.length <= room ? label : `${label.slice(0, room - 2)}..`;
  }

  let root = null;
  let focus = null;
  let hidden = false;
  const nodes = [];

  function show(n, x, w, ancestor) {
    const frame = n.frames[0];
    if (w < 0.3) {
      frame.g.setAttribute('display', 'none');
      return;
    }
    frame.g.removeAttribute('display');
    frame.g.classList.toggle('ancestor', ancestor);
    const y = top + n.depth * rowHeight;
    frame.rect.setAttribute('x', x.toFixed(2));
    frame.rect.setAttribute('y', y.toFixed(1));
    frame.rect.setAttribute('width', Math.max(w - 0.5, 0.1).toFixed(2));
    frame.text.setAttribute('x', (x + 3).toFixed(2));
    frame.text.setAttribute('y', (y + rowHeight - 5).toFixed(1));
    frame.text.textContent = fit(frame.label, w);
    frame.title.textContent = hidden ?
      `${n.name} (${n.bytes} bytes, ${humanBytes(n.bytes)}, ${(100 * n.bytes / total).toFixed(2)}%)` :
      frame.originalTitle;
  }

  function zoom(to) {
    focus = to;
    for (const frame of frames.values()) frame.g.setAttribute('display', 'none');
    for (let at = to.parent; at; at = at.parent) show(at, 0, width, true);
    const scale = to.w ? width / to.w : 0;
    const walk = n => {
      show(n, (n.x - to.x) * scale, n.w * scale, false);
      n.list.forEach(walk);
    };
    walk(to);
    document.getElementById('reset').setAttribute('visibility', to === root ? 'hidden' : 'visible');
    svg.setAttribute('data-focus', to.name);
  }

  function search() {
    const wanted = document.getElementById('search').value.toLowerCase();
    let bytes = 0;
    const walk = (n, under) => {
      const hit = wanted !== '' && n !== root && n.name.toLowerCase().includes(wanted);
      for (const frame of n.frames) {
        frame.g.classList.toggle('match', hit);
        frame.rect.setAttribute('fill', hit ? matchColor : frame.fill);
      }
      // A frame under another match is already counted in it.
      if (hit && !under) bytes += n.bytes;
      n.list.forEach(child => walk(child, under || hit));
    };
    walk(root, false);
    document.getElementById('matched').textContent = wanted === '' ? '' :
      `matched: ${humanBytes(bytes)} of ${humanBytes(total)} (${(100 * bytes / total).toFixed(1)}%)`;
    svg.setAttribute('data-matched-bytes', String(bytes));
  }

  function rebuild() {
    hidden = document.getElementById('hide-library').checked;
    root = tree(hidden);
    nodes.length = 0;
    const collect = n => {
      nodes.push(n);
      n.list.forEach(collect);
    };
    collect(root);
    for (const frame of frames.values()) frame.node = null;
    for (const n of nodes) n.frames[0].node = n;
    zoom(root);
    search();
  }

  for (const frame of frames.values()) {
    frame.g.addEventListener('click', () => {
      const n = frame.node;
      if (n) zoom(n === focus && n.parent ? n.parent : n);
    });
  }
  document.getElementById('reset').addEventListener('click', () => zoom(root));
  document.getElementById('search').addEventListener('input', search);
  document.getElementById('hide-library').addEventListener('change', rebuild);
  rebuild();
  svg.setAttribute('data-ready', '1');
})();
