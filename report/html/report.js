// memtrace-report html: the glue between the report's data (the JSON element
// #memtrace-data, written by render_html.cpp) and d3, which draws everything.
//
// Strings from the trace (file and function names, annotations) are data: they reach the
// page only through d3's .text() and .attr(), never as markup (Note [HTML report safety]
// in render_html.cpp).
'use strict';

(function () {
  const data = JSON.parse(document.getElementById('memtrace-data').textContent);
  const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  const OTHER_COLOR = '#c7c7c7';

  // As humanBytes() in tools/report/locations.cpp: four significant digits.
  function humanBytes(bytes) {
    if (bytes < 1024) return `${bytes} B`;
    let value = bytes;
    let unit = 0;
    while (value >= 1024 && unit < 5) {
      value /= 1024;
      unit += 1;
    }
    const digits = value >= 100 ? 1 : value >= 10 ? 2 : 3;
    return `${value.toFixed(digits)} ${UNITS[unit]}`;
  }
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
    for (const device of s.devices) {
      const name = (device.name || '(unnamed)') + (device.total_bytes ? `, ${humanBytes(device.total_bytes)}` : '');
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

  function drawTimeline() {
    const tl = data.timeline;
    const laneCount = tl.lane_names.length;
    const samples = tl.time_ns.map((t, i) => {
      const sample = {t: t / 1e9, total: tl.bytes[i], index: i};
      for (let lane = 0; lane < laneCount; lane++) sample[lane] = tl.lanes[lane][i];
      return sample;
    });
    const series = d3.stack().keys(d3.range(laneCount))(samples);

    const legend = d3.select('#legend');
    tl.lane_names.forEach((name, lane) => {
      const item = legend.append('div').attr('class', 'legend-item').attr('title', name);
      item.append('div').attr('class', 'swatch').style('background', laneColor(lane, laneCount));
      item.append('span').attr('class', 'name').text(name);
    });

    const width = Math.max(700, d3.select('#timeline').node().clientWidth || 1000);
    const height = 380;
    const margin = {top: 30, right: 24, bottom: 38, left: 84};
    const plotWidth = width - margin.left - margin.right;
    const plotHeight = height - margin.top - margin.bottom;
    const duration = Math.max(tl.duration_ns, 1) / 1e9;
    const predicted = data.estimate ? data.estimate.peak_requested_bytes : 0;
    const top = Math.max(tl.peak.bytes, predicted, 1) * 1.1;

    const x0 = d3.scaleLinear().domain([0, duration]).range([0, plotWidth]);
    let x = x0;
    const y = d3.scaleLinear().domain([0, top]).range([plotHeight, 0]);

    const svg = d3.select('#timeline').append('svg').attr('width', width).attr('height', height);
    svg.append('defs').append('clipPath').attr('id', 'timeline-clip')
      .append('rect').attr('width', plotWidth).attr('height', plotHeight + 1);
    const plot = svg.append('g').attr('transform', `translate(${margin.left},${margin.top})`);
    const clipped = plot.append('g').attr('clip-path', 'url(#timeline-clip)');
    const phases = clipped.append('g');
    const areas = clipped.append('g');
    const marks = clipped.append('g');
    const xAxis = plot.append('g').attr('class', 'axis').attr('transform', `translate(0,${plotHeight})`);
    plot.append('g').attr('class', 'axis').call(d3.axisLeft(y).ticks(8).tickFormat(humanBytes));
    plot.append('text').attr('x', plotWidth / 2).attr('y', plotHeight + 32).attr('text-anchor', 'middle')
      .attr('font-size', 11).text('seconds since the trace began');

    const area = d3.area().curve(d3.curveStepAfter)
      .x(d => x(d.data.t)).y0(d => y(d[0])).y1(d => y(d[1]));
    const paths = areas.selectAll('path').data(series).enter().append('path')
      .attr('class', 'lane').attr('fill', d => laneColor(d.key, laneCount));

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
    const bandGroups = phases.selectAll('g').data(bands).enter().append('g').attr('class', 'phase');
    bandGroups.append('rect').attr('y', 0).attr('height', plotHeight);
    bandGroups.append('text').attr('y', 11).text(d => d[0].name);

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
    markGroups.append('line').attr('y1', 0).attr('y2', plotHeight);
    markGroups.append('text').attr('y', (d, i) => 22 + (i % 4) * 12).attr('dx', 3).text(markLabel);
    const failures = marks.selectAll('line.failure').data(tl.failures).enter().append('line')
      .attr('class', 'failure').attr('y1', plotHeight - 10).attr('y2', plotHeight);

    const peak = plot.append('g').attr('class', 'peak-marker')
      .attr('data-bytes', tl.peak.bytes).attr('data-time-ns', tl.peak.time_ns);
    peak.append('line').attr('y1', y(tl.peak.bytes)).attr('y2', plotHeight);
    peak.append('circle').attr('r', 5).attr('cy', y(tl.peak.bytes));
    const peakText = `peak ${humanBytes(tl.peak.bytes)} at ${seconds(tl.peak.time_ns)}`;
    peak.append('text').attr('y', y(tl.peak.bytes) - 9).text(peakText);

    if (predicted) {
      const line = plot.append('g').attr('class', 'predicted-peak').attr('data-bytes', predicted);
      line.append('line').attr('x1', 0).attr('x2', plotWidth).attr('y1', y(predicted)).attr('y2', y(predicted));
      line.append('text').attr('x', plotWidth - 4).attr('y', y(predicted) - 5).attr('text-anchor', 'end')
        .text(`predicted peak ${humanBytes(predicted)}`);
    }

    const hoverLine = plot.append('line').attr('class', 'hover-line').attr('y1', 0).attr('y2', plotHeight)
      .attr('visibility', 'hidden');

    function redraw() {
      xAxis.call(d3.axisBottom(x).ticks(10));
      paths.attr('d', area);
      bandGroups.select('rect').attr('x', d => x(d[0].time_ns / 1e9))
        .attr('width', d => Math.max(1, x(d[1] / 1e9) - x(d[0].time_ns / 1e9)));
      bandGroups.select('text').attr('x', d => x(d[0].time_ns / 1e9) + 3);
      markGroups.attr('transform', d => `translate(${x(d.time_ns / 1e9)},0)`);
      failures.attr('x1', d => x(d.time_ns / 1e9)).attr('x2', d => x(d.time_ns / 1e9));
      const px = x(tl.peak.time_ns / 1e9);
      peak.select('line').attr('x1', px).attr('x2', px);
      peak.select('circle').attr('cx', px);
      peak.select('text').attr('x', px + 8).attr('text-anchor', px > plotWidth * 0.7 ? 'end' : 'start')
        .attr('dx', px > plotWidth * 0.7 ? -16 : 0);
      peak.attr('visibility', px < 0 || px > plotWidth ? 'hidden' : 'visible');
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
      const t = sample.t;
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
        redraw();
      });
    overlay.call(zoom).on('dblclick.zoom', null)
      .on('dblclick', () => overlay.call(zoom.transform, d3.zoomIdentity));
    redraw();
  }

  // ---- flame graph (icicle) -------------------------------------------------------------
  function drawFlame() {
    const table = data.table;
    d3.select('#flame-title').text(`Live at ${table.at} (${humanBytes(table.bytes)}), by stack`);
    const list = data.flame.nodes.map(([parent, name, kind, bytes, allocations], id) =>
      ({id, parent, name, kind, bytes, allocations, children: []}));
    for (const node of list.slice(1)) list[node.parent].children.push(node);
    const root = d3.hierarchy(list[0])
      .sum(d => Math.max(0, d.bytes - d.children.reduce((sum, child) => sum + child.bytes, 0)))
      .sort((a, b) => b.value - a.value);
    const rowHeight = 18;
    const width = Math.max(700, d3.select('#flame').node().clientWidth || 1000);
    const height = (root.height + 1) * rowHeight + 2;
    d3.partition().size([1, root.height + 1])(root);
    const total = root.data.bytes;
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
    const svg = d3.select('#flame').append('svg').attr('width', width).attr('height', height);
    const frames = svg.selectAll('g').data(root.descendants()).enter().append('g')
      .attr('class', 'flame-frame').attr('data-name', d => d.data.name).attr('data-bytes', d => d.data.bytes);
    frames.append('rect').attr('height', rowHeight - 1).attr('fill', colorOf);
    frames.append('text').attr('y', rowHeight - 5).attr('dx', 3);
    frames.on('mousemove', d => {
      showTooltip(`${d.data.name}\n${humanBytes(d.data.bytes)} (${d.data.bytes} bytes), ${percent(d.data.bytes, total)}` +
        ` of what was live, ${d.data.allocations} allocations`);
    }).on('mouseleave', hideTooltip);

    let focus = root;
    function layout() {
      const scale = d3.scaleLinear().domain([focus.x0, focus.x1]).range([0, width]).clamp(true);
      frames.attr('transform', d => `translate(${scale(d.x0)},${d.depth * rowHeight})`)
        .attr('display', d => (scale(d.x1) - scale(d.x0) < 0.5 ? 'none' : null));
      frames.select('rect').attr('width', d => Math.max(0, scale(d.x1) - scale(d.x0) - 0.5));
      frames.select('text').text(d => {
        const room = Math.floor((scale(d.x1) - scale(d.x0) - 6) / 6.7);
        if (room < 3) return '';
        return d.data.name.length <= room ? d.data.name : `${d.data.name.slice(0, room - 1)}…`;
      });
      svg.attr('data-focus', focus.data.name);
    }
    frames.on('click', d => {
      focus = d === focus && d.parent ? d.parent : d;
      layout();
    });
    layout();
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

  drawSummary();
  drawTimeline();
  drawFlame();
  drawTable();
  // For bench/views.py: how long the page took to parse its data and draw everything.
  document.body.setAttribute('data-drawn-ms', Math.round(performance.now()));
  document.body.setAttribute('data-ready', '1');
})();
