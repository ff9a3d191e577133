// memtrace-report html: the glue between the report's data (the JSON element
// #memtrace-data, written by render_html.cpp) and d3, which draws everything.
//
// Strings from the trace (file and function names, annotations) are data: they reach the
// page only through d3's .text() and .attr(), never as markup (Note [HTML report safety]
// in render_html.cpp).
'use strict';

(function () {
  const data = JSON.parse(document.getElementById('memtrace-data').textContent);
  const OTHER_COLOR = '#c7c7c7';
  function seconds(ns) {
    const s = ns / 1e9;
    return s !== 0 && s < 0.001 ? `${(ns / 1e3).toFixed(1)} µs` : `${s.toFixed(3)} s`;
  }
  function percent(part, whole) {
    return whole > 0 ? `${((100 * part) / whole).toFixed(1)}%` : '-';
  }

  const tooltip = d3.select('#tooltip');
  function showTooltip(text) {
    const [x, y] = [d3.event.clientX, d3.event.clientY];
    tooltip.text(text).attr('hidden', null);
    const box = tooltip.node().getBoundingClientRect();
    const left = x + 14 + box.width > window.innerWidth ? x - 14 - box.width : x + 14;
    const top = y + 14 + box.height > window.innerHeight ? y - 14 - box.height : y + 14;
    tooltip.style('left', `${Math.max(0, left)}px`).style('top', `${Math.max(0, top)}px`);
  }
  function hideTooltip() {
    tooltip.attr('hidden', true);
  }

  // ---- summary ------------------------------------------------------------------------
  function drawSummary() {
    const s = data.summary;
    d3.select('#subtitle').text(s.trace);
    const rows = [
      ['Command', s.command_line.join(' ')],
      ['Peak', `${humanBytes(s.peak_bytes)} (${s.peak_bytes} bytes) at ${seconds(s.peak_time_ns)}, event ${s.peak_event}` +
        (s.device_filter >= 0 ? ` on device ${s.device_filter}` : '')],
      ['Total allocated', humanBytes(s.allocated_bytes)],
      ['Live at the end', humanBytes(s.end_bytes)],
      ['Events', `${s.events} (${s.allocations} allocations, ${s.frees} frees, ${s.failed_allocations} failed, ` +
        `${s.untraced_allocations} untraced)`],
      ['Duration', seconds(s.duration_ns)],
      ['Process', `pid ${s.pid}, ${s.tracer_version}, stacks: ${s.stacks}, level: ${s.level}`],
    ];
    if (data.simulated) rows.push(['Simulated', `${data.simulated.label}: ${data.simulated.meaning}`]);
    for (const device of s.devices) {
      const name = (device.name || '(unnamed)') + (device.total_bytes ? `, ${humanBytes(device.total_bytes)}` : '') +
        (data.simulated ? ` (${data.simulated.label})` : '');
      rows.push([`Device ${device.device < 0 ? '?' : device.device}`,
        `${name}: peak ${humanBytes(device.peak_bytes)} at ${seconds(device.peak_time_ns)}`]);
    }
    if (data.estimate) {
      const e = data.estimate;
      rows.push(['Predicted peak', `${humanBytes(e.peak_requested_bytes)} (${e.peak_requested_bytes} bytes)` +
        `${e.lower_bound ? ', a lower bound' : ''}; measured/predicted ` +
        `${e.peak_requested_bytes ? (s.peak_bytes / e.peak_requested_bytes).toFixed(2) : '-'}`]);
      rows.push(['Estimate', `${e.model || '(model unnamed)'}, ${e.semantics}, from ${e.path}`]);
    }
    if (s.cut_offset) rows.push(['Note', `the file ends in a partial chunk at byte ${s.cut_offset}: read up to there`]);
    else if (!s.ended_cleanly) rows.push(['Note', 'the trace has no end mark: the process was killed or is still running']);
    const dl = d3.select('#summary');
    for (const [term, value] of rows) {
      dl.append('dt').text(term);
      dl.append('dd').text(value);
    }
  }

  // ---- timeline -----------------------------------------------------------------------
  function laneColor(lane, lanes) {
    return lane === lanes - 1 ? OTHER_COLOR : d3.schemeTableau10[lane % 10];
  }

  // Note [Round byte ticks]
  // d3's ticks are round in decimal bytes (10 MB), which read as 9.537 MiB. The axis takes
  // the binary unit its top falls in (the largest unit the top is at least 1 of) and puts
  // its ticks at multiples of 1, 2 or 5 x 10^k of that unit: 0, 10, 20 MiB, or 0, 0.5,
  // 1.0 GiB; bytes (below 1 KiB) step by whole bytes.
  function byteTicks(top, count) {
    let unit = 0;
    while (unit < BYTE_UNITS.length - 1 && top >= 1024 ** (unit + 1)) unit += 1;
    const scale = 1024 ** unit;
    let step = d3.tickStep(0, top / scale, count);
    if (unit === 0) step = Math.max(1, Math.round(step));
    const digits = d3.precisionFixed(step);
    const values = [];
    for (let i = 0; i * step <= top / scale * (1 + 1e-12); i++) values.push(i * step * scale);
    const format = bytes => (bytes === 0 ? '0' : `${(bytes / scale).toFixed(digits)} ${BYTE_UNITS[unit]}`);
    return {values, format};
  }

  // Note [Timeline labels]
  // The peak's label, the predicted peak's, and those of the marks and phases are laid out
  // on every redraw so that no two boxes intersect, whatever the zoom and the page's width:
  // the peak's first (it is always shown while its point is in view), then the predicted
  // peak's, each trying a few places around its point or line; then the marks' and phases'
  // in time order, each in the first of a few rows at the top where it clears the labels
  // already placed (the rows lie above the plot, clear of the data), or hidden (its line
  // stays) when none has room.
  function labelLayout(plotWidth, plotHeight, marginTop) {
    const placed = [];
    const intersects = (a, b) => a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
    const fits = box => box.x0 >= 0 && box.x1 <= plotWidth && box.y0 >= -marginTop && box.y1 <= plotHeight;
    return {
      placed,
      // Tries each [x, y, anchor] in turn: the first that fits and intersects nothing is
      // taken. Returns it, or null.
      place(size, candidates) {
        for (const [x, y, anchor] of candidates) {
          const x0 = anchor === 'end' ? x - size.width : anchor === 'middle' ? x - size.width / 2 : x;
          const box = {x0: x0 - 2, x1: x0 + size.width + 2, y0: y - size.up - 1, y1: y + size.down + 1};
          if (fits(box) && !placed.some(other => intersects(box, other))) {
            placed.push(box);
            return {x, y, anchor};
          }
        }
        return null;
      },
    };
  }

  // A text's width and its extent above and below its baseline, once (its text is fixed).
  function measure(text) {
    const node = text.node();
    const y = Number(text.attr('y')) || 0;
    const box = node.getBBox();
    return {width: box.width, up: y - box.y, down: box.y + box.height - y};
  }

  function drawTimeline() {
    const tl = data.timeline;
    const laneCount = tl.lane_names.length;
    const samples = tl.time_ns.map((t, i) => {
      const sample = {t: t / 1e9, total: tl.bytes[i], index: i};
      for (let lane = 0; lane < laneCount; lane++) sample[lane] = tl.lanes[lane][i];
      return sample;
    });

    // Note [The timeline's default view]
    // The view opens on the traced activity: from a little before the first traced
    // allocation (or the peak, if that came first) to a little past the trace's end, rather
    // than on the whole trace, whose start can be a long flat band of memory allocated
    // before tracing began. Past the end the line holds its last value, so that a peak that
    // is the last event still shows as an area. Double-click returns to this view; "whole
    // trace" shows everything.
    const duration = Math.max(tl.duration_ns, 1) / 1e9;
    const peakTime = tl.peak.time_ns / 1e9;
    const firstTraced = Math.min((tl.first_traced_ns === undefined ? 0 : tl.first_traced_ns) / 1e9, peakTime);
    let start = Math.max(0, firstTraced - 0.03 * (duration - firstTraced));
    if (start < 0.05 * duration) start = 0;
    const end = duration + Math.max(0.03 * (duration - start), 1e-9);
    const last = samples[samples.length - 1];
    samples.push(Object.assign({}, last, {t: end, index: samples.length}));
    const series = d3.stack().keys(d3.range(laneCount))(samples);

    const legend = d3.select('#legend');
    tl.lane_names.forEach((name, lane) => {
      const item = legend.append('div').attr('class', 'legend-item').attr('title', name);
      item.append('div').attr('class', 'swatch').style('background', laneColor(lane, laneCount));
      item.append('span').attr('class', 'name').text(name);
    });

    // Phases: a band from each begin to the end that closes it (the innermost open one).
    const bands = [];
    const open = [];
    const points = [];
    for (const mark of tl.marks) {
      if (mark.kind === 'phase-begin') open.push(mark);
      else if (mark.kind === 'phase-end' && open.length) bands.push([open.pop(), mark.time_ns]);
      else if (mark.kind !== 'phase-end') points.push(mark);
    }
    for (const begin of open) bands.push([begin, tl.duration_ns]);
    // Spans with tracing stopped: shaded. When tracing was switched often, the shading says
    // it and the marks' labels would only crowd out the others: they are left out.
    const offSpans = [];
    let stoppedAt = null;
    for (const mark of points) {
      if (mark.kind === 'tracing-stopped' && stoppedAt === null) stoppedAt = mark.time_ns;
      else if (mark.kind === 'tracing-started' && stoppedAt !== null) {
        offSpans.push([stoppedAt, mark.time_ns]);
        stoppedAt = null;
      }
    }
    if (stoppedAt !== null) offSpans.push([stoppedAt, tl.duration_ns]);
    const labelTracing = points.filter(mark => mark.kind.startsWith('tracing')).length <= 4;
    // As wide as the page allows (a chart wider than its section would be cut off).
    const width = Math.max(360, d3.select('#timeline').node().clientWidth || 1000);
    // The marks' and phases' labels have their own rows above the plot, clear of the data.
    const labelCount = bands.length + points.filter(m => labelTracing || !m.kind.startsWith('tracing')).length;
    const labelRows = Math.min(4, Math.max(1, labelCount));
    const rowHeight = 13;
    const height = 380 + labelRows * rowHeight;
    const margin = {top: 12 + labelRows * rowHeight, right: 24, bottom: 38, left: 84};
    const plotWidth = width - margin.left - margin.right;
    const plotHeight = height - margin.top - margin.bottom;
    const predicted = data.estimate ? data.estimate.peak_requested_bytes : 0;
    const top = Math.max(tl.peak.bytes, predicted, 1) * 1.1;

    const x0 = d3.scaleLinear().domain([0, end]).range([0, plotWidth]);
    let x = x0;
    const y = d3.scaleLinear().domain([0, top]).range([plotHeight, 0]);
    const ticks = byteTicks(top, 8);

    const svg = d3.select('#timeline').append('svg').attr('width', width).attr('height', height);
    svg.append('defs').append('clipPath').attr('id', 'timeline-clip')
      .append('rect').attr('y', -margin.top).attr('width', plotWidth).attr('height', margin.top + plotHeight + 1);
    const plot = svg.append('g').attr('transform', `translate(${margin.left},${margin.top})`);
    const clipped = plot.append('g').attr('clip-path', 'url(#timeline-clip)');
    const phases = clipped.append('g');
    const areas = clipped.append('g');
    const marks = clipped.append('g');
    const xAxis = plot.append('g').attr('class', 'axis').attr('transform', `translate(0,${plotHeight})`);
    plot.append('g').attr('class', 'axis y-axis')
      .call(d3.axisLeft(y).tickValues(ticks.values).tickFormat(ticks.format));
    plot.append('text').attr('x', plotWidth / 2).attr('y', plotHeight + 32).attr('text-anchor', 'middle')
      .attr('font-size', 11).text('seconds since the trace began');

    // Note [One pixel, its highest sample]
    // The C++ side keeps every bucket's highest sample (Note [Timeline downsampling]), but a
    // spike one event wide is far narrower than a pixel and would not show: the exact peak
    // could be a point above an area that never reaches it. So the areas are drawn from
    // what each pixel column of the current view holds: its highest sample (split by lane
    // as it was), then from the next column on its last sample, until the next column with
    // samples of its own. Hovering still reads the samples themselves.
    const bisectTime = d3.bisector(d => d.t).right;
    function columns() {
      const [from, to] = x.domain();
      const out = [];
      let column = null;
      let highest = null;
      let latest = null;
      const flush = () => {
        if (column === null) return;
        out.push({px: column, sample: highest}, {px: column + 1, sample: latest});
      };
      for (let i = Math.max(0, bisectTime(samples, from) - 1); i < samples.length; i++) {
        const sample = samples[i];
        const px = Math.max(-1, Math.floor(x(sample.t)));
        if (px !== column) {
          flush();
          column = px;
          highest = sample;
        } else if (sample.total > highest.total) {
          highest = sample;
        }
        latest = sample;
        if (sample.t > to) break;
      }
      flush();
      return d3.stack().keys(d3.range(laneCount)).value((d, lane) => d.sample[lane])(out);
    }
    const area = d3.area().curve(d3.curveStepAfter)
      .x(d => d.data.px).y0(d => y(d[0])).y1(d => y(d[1]));
    const paths = areas.selectAll('path').data(series).enter().append('path')
      .attr('class', 'lane').attr('data-lane', d => d.key).attr('fill', d => laneColor(d.key, laneCount));
    const endLine = marks.append('line').attr('class', 'trace-end').attr('y1', 0).attr('y2', plotHeight);

    const offRects = phases.selectAll('rect.tracing-off').data(offSpans).enter().append('rect')
      .attr('class', 'tracing-off').attr('y', 0).attr('height', plotHeight);
    if (offSpans.length) {
      const item = legend.append('div').attr('class', 'legend-item').attr('title', 'tracing stopped');
      item.append('div').attr('class', 'swatch tracing-off');
      item.append('span').attr('class', 'name').text('tracing off');
    }
    const bandGroups = phases.selectAll('g').data(bands).enter().append('g').attr('class', 'phase');
    bandGroups.append('rect').attr('y', -margin.top + 2).attr('height', margin.top - 2 + plotHeight);
    bandGroups.append('text').attr('class', 'label').attr('y', 0).text(d => d[0].name);

    const markLabel = mark => {
      switch (mark.kind) {
        case 'tracing-started': return 'tracing on';
        case 'tracing-stopped': return 'tracing off';
        case 'process-exit': return 'exit';
        case 'trace-closed': return 'closed';
        default: return mark.name;
      }
    };
    const markGroups = marks.selectAll('g.mark').data(points).enter().append('g')
      .attr('class', d => `mark ${d.kind.startsWith('tracing') ? 'tracing' : d.kind}`);
    markGroups.append('line').attr('y1', -margin.top + 2).attr('y2', plotHeight);
    markGroups.append('text').attr('class', 'label').attr('y', 0).text(markLabel);
    const failures = marks.selectAll('line.failure').data(tl.failures).enter().append('line')
      .attr('class', 'failure').attr('y1', plotHeight - 10).attr('y2', plotHeight);

    const peak = plot.append('g').attr('class', 'peak-marker')
      .attr('data-bytes', tl.peak.bytes).attr('data-time-ns', tl.peak.time_ns);
    peak.append('line').attr('y1', y(tl.peak.bytes)).attr('y2', plotHeight);
    peak.append('circle').attr('r', 5).attr('cy', y(tl.peak.bytes));
    const peakText = peak.append('text').attr('class', 'label').attr('y', 0)
      .text(`peak ${humanBytes(tl.peak.bytes)} at ${seconds(tl.peak.time_ns)}`);
    const peakSize = measure(peakText);

    let predictedText = null;
    let predictedSize = null;
    if (predicted) {
      const line = plot.append('g').attr('class', 'predicted-peak').attr('data-bytes', predicted);
      line.append('line').attr('x1', 0).attr('x2', plotWidth).attr('y1', y(predicted)).attr('y2', y(predicted));
      predictedText = line.append('text').attr('class', 'label').attr('y', 0)
        .text(`predicted peak ${humanBytes(predicted)}`);
      predictedSize = measure(predictedText);
    }
    // Marks and phases, in time order, with their sizes.
    const rowLabels = [];
    markGroups.each(function (d) {
      const text = d3.select(this).select('text');
      if (!labelTracing && d.kind.startsWith('tracing')) {
        d3.select(this).remove();
        return;
      }
      rowLabels.push({text, time: d.time_ns / 1e9, size: measure(text), inGroup: true});
    });
    bandGroups.each(function (d) {
      const text = d3.select(this).select('text');
      rowLabels.push({text, time: d[0].time_ns / 1e9, size: measure(text), inGroup: false});
    });
    rowLabels.sort((a, b) => a.time - b.time);

    const hoverLine = plot.append('line').attr('class', 'hover-line').attr('y1', 0).attr('y2', plotHeight)
      .attr('visibility', 'hidden');

    function show(text, at) {
      if (!at) {
        text.attr('display', 'none');
        return;
      }
      text.attr('display', null).attr('x', at.x).attr('y', at.y).attr('text-anchor', at.anchor);
    }

    function layoutLabels() {
      const layout = labelLayout(plotWidth, plotHeight, margin.top);
      const px = x(peakTime);
      const py = y(tl.peak.bytes);
      if (px >= 0 && px <= plotWidth) {
        const candidates = [];
        for (const dy of [-9, 18, 32, 46, 60, 74, 88]) {
          candidates.push([px + 8, py + dy, 'start'], [px - 8, py + dy, 'end']);
        }
        // Last: anywhere along the top, so that the peak's label is always shown.
        for (let row = 0; row < 24; row++) {
          for (const fx of [0.5, 0.25, 0.75, 0, 1]) {
            const ty = -margin.top + peakSize.up + 2 + row * rowHeight;
            candidates.push([fx * (plotWidth - peakSize.width), ty, 'start']);
          }
        }
        show(peakText, layout.place(peakSize, candidates));
      }
      if (predictedText) {
        const yp = y(predicted);
        const candidates = [];
        // Above the line before below it (where the data is), at either end, then between.
        for (const dy of [-5, 14, -19, 28, -33, 42]) {
          for (const [fx, anchor] of [[plotWidth - 4, 'end'], [4, 'start'], [plotWidth / 2, 'middle'],
            [plotWidth / 4, 'middle'], [(3 * plotWidth) / 4, 'middle']]) {
            candidates.push([fx, yp + dy, anchor]);
          }
        }
        show(predictedText, layout.place(predictedSize, candidates));
      }
      for (const label of rowLabels) {
        const lx = x(label.time);
        if (lx < 0 || lx > plotWidth) {
          show(label.text, null);
          continue;
        }
        const side = lx + 3 + label.size.width + 2 <= plotWidth ? [lx + 3, 'start'] : [lx - 3, 'end'];
        const candidates = [];
        for (let row = 0; row < labelRows; row++) {
          candidates.push([side[0], -margin.top + 11 + row * rowHeight, side[1]]);
        }
        const at = layout.place(label.size, candidates);
        // A mark's text sits in its group, which is moved to the mark's time.
        show(label.text, at && label.inGroup ? {x: at.x - lx, y: at.y, anchor: at.anchor} : at);
      }
    }

    function redraw() {
      xAxis.call(d3.axisBottom(x).ticks(Math.max(2, Math.floor(plotWidth / 110))));
      paths.data(columns()).attr('d', area);
      endLine.attr('x1', x(duration)).attr('x2', x(duration));
      offRects.attr('x', d => x(d[0] / 1e9)).attr('width', d => Math.max(1, x(d[1] / 1e9) - x(d[0] / 1e9)));
      bandGroups.select('rect').attr('x', d => x(d[0].time_ns / 1e9))
        .attr('width', d => Math.max(1, x(d[1] / 1e9) - x(d[0].time_ns / 1e9)));
      markGroups.attr('transform', d => `translate(${x(d.time_ns / 1e9)},0)`);
      failures.attr('x1', d => x(d.time_ns / 1e9)).attr('x2', d => x(d.time_ns / 1e9));
      const px = x(peakTime);
      peak.select('line').attr('x1', px).attr('x2', px);
      peak.select('circle').attr('cx', px);
      peak.attr('visibility', px < 0 || px > plotWidth ? 'hidden' : 'visible');
      layoutLabels();
    }

    const bisect = d3.bisector(d => d.t).right;
    const overlay = plot.append('rect').attr('class', 'overlay').attr('width', plotWidth).attr('height', plotHeight)
      .attr('fill', 'transparent');
    overlay.on('mousemove', function () {
      const [mx, my] = d3.mouse(this);
      // The highest sample within a few pixels: a spike one event wide stays catchable.
      let i = Math.max(0, bisect(samples, x.invert(mx - 3)) - 1);
      const last = Math.max(0, bisect(samples, x.invert(mx + 3)) - 1);
      for (let j = i + 1; j <= last; j++) if (samples[j].total > samples[i].total) i = j;
      const sample = samples[i];
      const t = Math.min(sample.t, duration);
      const atBytes = y.invert(my);
      let under = -1;
      for (let lane = 0; lane < laneCount; lane++) {
        const [low, high] = series[lane][i];
        if (atBytes >= low && atBytes < high) under = lane;
      }
      hoverLine.attr('x1', mx).attr('x2', mx).attr('visibility', 'visible');
      const lines = [`${seconds(t * 1e9)}: ${humanBytes(sample.total)} live`];
      if (under >= 0) {
        lines.push(`▶ ${tl.lane_names[under]}: ${humanBytes(sample[under])}`);
      }
      const ranked = d3.range(laneCount).filter(l => sample[l] > 0 && l !== under)
        .sort((a, b) => sample[b] - sample[a]).slice(0, 6);
      for (const lane of ranked) lines.push(`  ${tl.lane_names[lane]}: ${humanBytes(sample[lane])}`);
      showTooltip(lines.join('\n'));
    }).on('mouseleave', () => {
      hoverLine.attr('visibility', 'hidden');
      hideTooltip();
    });

    const zoom = d3.zoom().scaleExtent([1, 1e7])
      .extent([[0, 0], [plotWidth, plotHeight]])
      .translateExtent([[0, 0], [plotWidth, plotHeight]])
      .on('zoom', () => {
        x = d3.event.transform.rescaleX(x0);
        d3.select('#timeline svg').attr('data-view', x.domain().join(' '));
        redraw();
      });
    const scale = end / (end - start);
    const traced = d3.zoomIdentity.scale(scale).translate(-x0(start), 0);
    overlay.call(zoom).on('dblclick.zoom', null)
      .on('dblclick', () => overlay.call(zoom.transform, traced));
    d3.select('#timeline-traced').on('click', () => overlay.call(zoom.transform, traced));
    d3.select('#timeline-whole').on('click', () => overlay.call(zoom.transform, d3.zoomIdentity));
    if (start > 0) {
      d3.select('#timeline-note').text(`The view opens at ${seconds(start * 1e9)}, where traced allocations ` +
        `begin; before that, ${humanBytes(samples[Math.max(0, bisect(samples, start) - 1)].total)} ` +
        'was already live.');
    }
    overlay.call(zoom.transform, traced);
  }

  // ---- flame graph (icicle) -------------------------------------------------------------
  // Frames show their short label (Note [Short frame names] in flame.h), the tooltip their
  // full name. "Hide library frames" rebuilds the tree without them: each stack's bytes
  // go to its nearest frame outside the libraries, and stacks that meet there merge. The
  // search matches full names, case-insensitively; the share it shows counts a matched
  // frame under another matched frame once.
  function drawFlame() {
    const table = data.table;
    d3.select('#flame-title').text(`Live at ${table.at} (${humanBytes(table.bytes)}), by stack`);
    const list = data.flame.nodes.map(([parent, name, kind, bytes, allocations, label, library], id) =>
      ({id, parent, name, kind, bytes, allocations, label: label === undefined ? name : label,
        library: Boolean(library), children: []}));
    for (const node of list.slice(1)) list[node.parent].children.push(node);
    const total = list.length ? list[0].bytes : 0;

    // The tree drawn: the trace's, or the same without library frames.
    function tree(hideLibrary) {
      const copy = (node) => ({name: node.name, label: node.label, kind: node.kind, library: node.library,
        bytes: 0, allocations: 0, self: 0, children: new Map()});
      const root = copy(list[0]);
      const walk = (node, into) => {
        let at = into;
        if (node !== list[0] && !(hideLibrary && node.library)) {
          if (!into.children.has(node.name)) into.children.set(node.name, copy(node));
          at = into.children.get(node.name);
        }
        if (at !== into || node === list[0]) at.allocations += node.allocations;
        at.self += node.bytes - node.children.reduce((sum, child) => sum + child.bytes, 0);
        for (const child of node.children) walk(child, at);
      };
      walk(list[0], root);
      // A node's bytes: its own and its children's, as merged.
      const recount = node => {
        node.childList = [...node.children.values()];
        node.bytes = node.self + node.childList.reduce((sum, child) => sum + recount(child), 0);
        return node.bytes;
      };
      recount(root);
      return root;
    }

    const colorOf = d => {
      const hash = [...d.data.name].reduce((h, c) => (h * 31 + c.charCodeAt(0)) | 0, 7) >>> 0;
      switch (d.data.kind) {
        case 'python': return `rgb(${205 + (hash % 50)},${80 + ((hash >> 8) % 130)},${40 + ((hash >> 16) % 40)})`;
        case 'native': return `rgb(${80 + (hash % 60)},${140 + ((hash >> 8) % 60)},${200 + ((hash >> 16) % 55)})`;
        case 'device': return 'rgb(170,150,210)';
        case 'special': return 'rgb(190,190,190)';
        default: return 'rgb(225,225,225)';
      }
    };
    const rowHeight = 18;
    const width = Math.max(360, d3.select('#flame').node().clientWidth || 1000);
    const search = d3.select('#flame-search');
    const hide = d3.select('#flame-hide-library');
    let svg = null;
    let frames = null;
    let root = null;
    let focus = null;

    function layout() {
      const scale = d3.scaleLinear().domain([focus.x0, focus.x1]).range([0, width]).clamp(true);
      frames.attr('transform', d => `translate(${scale(d.x0)},${d.depth * rowHeight})`)
        .attr('display', d => (scale(d.x1) - scale(d.x0) < 0.5 ? 'none' : null));
      frames.select('rect').attr('width', d => Math.max(0, scale(d.x1) - scale(d.x0) - 0.5));
      frames.select('text').text(d => {
        const room = Math.floor((scale(d.x1) - scale(d.x0) - 6) / 6.7);
        if (room < 3) return '';
        return d.data.label.length <= room ? d.data.label : `${d.data.label.slice(0, room - 1)}…`;
      });
      svg.attr('data-focus', focus.data.name);
      d3.select('#flame-reset').property('disabled', focus === root);
    }

    function highlight() {
      const wanted = search.property('value').toLowerCase();
      let matched = 0;
      frames.each(function (d) {
        const hit = wanted !== '' && d.depth > 0 && d.data.name.toLowerCase().includes(wanted);
        d.matched = hit;
        d3.select(this).classed('match', hit).select('rect').attr('fill', hit ? 'rgb(230,0,230)' : colorOf(d));
      });
      frames.each(d => {
        if (d.matched && !d.ancestors().slice(1).some(a => a.matched)) matched += d.data.bytes;
      });
      d3.select('#flame-matched').attr('data-bytes', wanted === '' ? null : matched)
        .text(wanted === '' ? '' :
          `matched: ${humanBytes(matched)} of ${humanBytes(total)} (${percent(matched, total)})`);
    }

    function draw() {
      d3.select('#flame').selectAll('svg').remove();
      root = d3.hierarchy(tree(hide.property('checked')), d => d.childList)
        .sum(d => Math.max(0, d.self))
        .sort((a, b) => b.value - a.value);
      d3.partition().size([1, root.height + 1])(root);
      svg = d3.select('#flame').append('svg').attr('width', width).attr('height', (root.height + 1) * rowHeight + 2);
      frames = svg.selectAll('g').data(root.descendants()).enter().append('g')
        .attr('class', d => `flame-frame${d.data.library ? ' library' : ''}`)
        .attr('data-name', d => d.data.name).attr('data-bytes', d => d.data.bytes);
      frames.append('rect').attr('height', rowHeight - 1).attr('fill', colorOf);
      frames.append('text').attr('y', rowHeight - 5).attr('dx', 3);
      frames.on('mousemove', d => {
        showTooltip(`${d.data.name}\n${humanBytes(d.data.bytes)} (${d.data.bytes} bytes), ` +
          `${percent(d.data.bytes, total)}` +
          ` of what was live, ${d.data.allocations} allocations`);
      }).on('mouseleave', hideTooltip);
      frames.on('click', d => {
        focus = d === focus && d.parent ? d.parent : d;
        layout();
      });
      focus = root;
      layout();
      highlight();
    }
    search.on('input', highlight);
    hide.on('change', draw);
    d3.select('#flame-reset').on('click', () => {
      focus = root;
      layout();
    });
    draw();
  }

  // ---- table ---------------------------------------------------------------------------
  function drawTable() {
    const t = data.table;
    const shown = t.rows.length;
    d3.select('#table-title').text(`Live at ${t.at} (${humanBytes(t.bytes)} in ${t.allocations} allocations), ` +
      `by ${t.group_by}${t.frame === 'user' ? ' in user code' : ''}` +
      (shown < t.locations ? `, top ${shown} of ${t.locations}` : ''));
    const predicted = data.estimate !== null;
    const columns = ['Mem', 'Cumulative Mem', 'Median', 'Count'];
    if (predicted) columns.push('Predicted');
    columns.push('Location');
    const table = d3.select('#table');
    table.append('thead').append('tr').selectAll('th').data(columns).enter().append('th').text(d => d);
    const body = table.append('tbody');
    for (const row of t.rows) {
      const tr = body.append('tr').attr('class', `row ${row.kind}`);
      tr.append('td').attr('class', 'number').text(humanBytes(row.bytes));
      tr.append('td').attr('class', 'number').text(humanBytes(row.cumulative_bytes));
      tr.append('td').attr('class', 'number').text(humanBytes(row.median_bytes));
      tr.append('td').attr('class', 'number').text(row.count);
      if (predicted) {
        tr.append('td').attr('class', 'number predicted')
          .attr('data-bytes', row.predicted_bytes === null ? '' : row.predicted_bytes)
          .text(row.predicted_bytes === null ? '-' : humanBytes(row.predicted_bytes));
      }
      tr.append('td').attr('class', 'location').text(row.location);
    }
    if (shown < t.locations) {
      body.append('tr').attr('class', 'more').append('td').attr('colspan', columns.length)
        .text(`... ${t.locations - shown} more locations hold ${humanBytes(t.more_bytes)}`);
    }
  }

  // Note [The module table] (tracer/report/analysis.h): the peak's bytes by module and
  // category, sortable by any column (sortable_table.js), the categories line last. With an
  // estimate that has module x category cells (Note [Predicted module cells] in
  // tracer/report/prediction.h), each cell holds the prediction beneath the measured figure
  // ("=" where they are the same to the byte), and the rows the trace has none of come last.
  function drawModules() {
    const training = data.training;
    if (!training || !training.modules_at_peak.rows.length) return;
    const table = training.modules_at_peak;
    const predictedTotal = table.predicted_total;
    const categories = Object.keys(training.categories_at_peak)
      .filter(name => training.categories_at_peak[name] > 0 ||
        (predictedTotal && predictedTotal.categories[name] > 0));
    d3.select('#modules-section').attr('hidden', null);
    d3.select('#modules-title').text(`At the peak, by module and category (paths cut to ${table.depth} ` +
      `named part${table.depth === 1 ? '' : 's'}, * for repeated blocks)` +
      (predictedTotal ? '; beneath each figure, the estimate\'s (= the same to the byte)' : ''));
    const columns = [{title: 'Total', key: row => row.bytes, number: true}]
      .concat(categories.map(name => ({title: name, key: row => row.categories[name] || 0, number: true})))
      .concat([{title: 'Module', key: row => row.location, number: false}]);
    const rows = table.rows.concat((table.predicted_only || []).map(row => ({
      location: `${row.location} (predicted only)`, bytes: 0, categories: {}, predicted: row})));
    function cell(tr, measured, predicted) {
      const td = tr.append('td').attr('class', 'number').attr('data-bytes', measured);
      td.append('span').text(measured ? humanBytes(measured) : '-');
      if (predicted === undefined) return;
      td.attr('data-predicted-bytes', predicted);
      td.append('span').attr('class', 'predicted')
        .text(predicted === null ? '?' : predicted === measured ? '=' : predicted ? humanBytes(predicted) : '-');
    }
    const element = d3.select('#modules');
    sortableTable(element, columns, rows, {column: 'Total', descending: true}, (tr, row) => {
      tr.attr('data-module', row.location);
      // undefined: no estimate; null: a row the estimate cannot speak to.
      const predicted = predictedTotal ? row.predicted : undefined;
      cell(tr, row.bytes, predicted && predicted.bytes);
      for (const name of categories)
        cell(tr, row.categories[name] || 0, predicted && predicted.categories[name]);
      tr.append('td').attr('class', 'location').text(row.location);
    });
    const total = element.append('tfoot').append('tr').attr('class', 'all');
    cell(total, Object.values(training.categories_at_peak).reduce((a, b) => a + b, 0),
      predictedTotal && predictedTotal.bytes);
    for (const name of categories)
      cell(total, training.categories_at_peak[name], predictedTotal && predictedTotal.categories[name]);
    total.append('td').attr('class', 'location').text('(all: the categories line)');
  }

  // ---- a simulated run, an OOM, the reads of device values -------------------------------
  // Note [Saying a run was simulated] (render.h): the banner comes first, above the summary.
  function drawSimulated() {
    const sim = data.simulated;
    if (!sim) return;
    d3.select('#simulated-banner').attr('hidden', null).attr('data-profile', sim.profile)
      .text(`${sim.label}: ${sim.meaning}. Every figure on this page is the simulated card's, ` +
        `${sim.devices} device${sim.devices === 1 ? '' : 's'} of ${humanBytes(sim.memory_bytes)}.`);
  }

  function smallTable(selector, columns, rows) {
    const table = d3.select(selector);
    table.append('thead').append('tr').selectAll('th').data(columns).enter().append('th').text(d => d);
    const body = table.append('tbody');
    for (const cells of rows) {
      const tr = body.append('tr');
      cells.forEach((cell, i) => tr.append('td').attr('class', i < cells.length - 1 ? 'number' : 'location')
        .text(cell));
    }
  }

  function drawOom() {
    const oom = data.oom;
    if (!oom) return;
    d3.select('#oom-section').attr('hidden', null);
    const request = oom.request;
    d3.select('#oom-title').text(`Out of memory at ${seconds(request.time_ns)}` +
      (request.device >= 0 ? ` on device ${request.device}` : '') +
      `: a request of ${humanBytes(request.bytes)} failed`);
    const rows = [
      ['Requested at', request.location + (request.module ? `, in ${request.module}` : '')],
      ['Live then', `${humanBytes(oom.live_bytes)} in ${oom.live_allocations} allocations; ` +
        `live + request = ${humanBytes(oom.live_bytes + request.bytes)}`],
    ];
    if (oom.memory_bytes === null) {
      rows.push(['Memory', 'the device\'s memory is not in the trace']);
    } else {
      const whose = oom.memory_source === 'simulated'
        ? `the simulated ${data.simulated.profile}'s${data.simulated.memory_set_by_user ? ', set by the user' : ''}`
        : 'the device\'s total';
      rows.push(['Memory', `${humanBytes(oom.memory_bytes)} (${whose})`]);
      rows.push(oom.over_bytes > 0
        ? ['Over by', `${humanBytes(oom.over_bytes)} (${oom.over_bytes} bytes)`]
        : ['Under by', `${humanBytes(-oom.over_bytes)}: the rest was held outside any allocation call`]);
    }
    const dl = d3.select('#oom-summary');
    for (const [term, value] of rows) {
      dl.append('dt').text(term);
      dl.append('dd').attr('data-term', term).text(value);
    }
    const table = part => part.rows.map(row => [humanBytes(row.bytes), row.count, row.location]);
    smallTable('#oom-by-line', ['Mem', 'Count', 'Location'], table(oom.by_line));
    smallTable('#oom-by-module', ['Mem', 'Count', 'Module'], table(oom.by_module));
  }

  function drawDeviceReads() {
    const reads = data.device_reads;
    if (!reads) return;
    d3.select('#reads-section').attr('hidden', null);
    d3.select('#reads-title').text(reads.count
      ? `Reads of device values (${reads.count} copies from the device to the host, ` +
        `${humanBytes(reads.bytes)}), by line`
      : 'Reads of device values: none');
    d3.select('#reads-meaning').text(reads.count ? reads.meaning
      : 'No copy from the device to the host: nothing the program did depended on a value computed on the device.');
    if (reads.count)
      smallTable('#reads', ['Count', 'Bytes', 'Location'], reads.rows.map(row => [row.count, humanBytes(row.bytes), row.location]));
  }

  drawSimulated();
  drawSummary();
  drawOom();
  drawTimeline();
  drawFlame();
  drawModules();
  drawTable();
  drawDeviceReads();
  // For bench/views.py: how long the page took to parse its data and draw everything.
  document.body.setAttribute('data-drawn-ms', Math.round(performance.now()));
  document.body.setAttribute('data-ready', '1');
})();
