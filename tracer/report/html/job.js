// memtrace-report html of a job (several ranks' traces): the glue between the data (the JSON
// element #memtrace-data, written by render_job.cpp) and d3. One timeline per rank, all on the
// job's time axis (the ranks' clocks aligned as the data's "clocks" says), the peak marked.
//
// Strings from the traces are data: they reach the page only through d3's .text() and .attr(),
// never as markup (Note [HTML report safety] in render_html.cpp).
'use strict';

(function () {
  const data = JSON.parse(document.getElementById('memtrace-data').textContent);
  function seconds(ns) {
    return `${(ns / 1e9).toFixed(3)} s`;
  }

  const tooltip = d3.select('#tooltip');
  function showTooltip(text) {
    tooltip.text(text).attr('hidden', null)
      .style('left', `${d3.event.clientX + 14}px`).style('top', `${d3.event.clientY + 14}px`);
  }
  function hideTooltip() {
    tooltip.attr('hidden', true);
  }

  // Note [Saying a run was simulated] (render.h): the ranks made on the simulated GPU, first.
  function drawSimulated() {
    const simulated = data.ranks.filter(rank => rank.simulated);
    if (!simulated.length) return;
    const labels = [...new Set(simulated.map(rank => rank.simulated.label))];
    const who = simulated.length === data.ranks.length ? 'Every rank' : simulated.map(rank => rank.label).join(', ');
    d3.select('#simulated-banner').attr('hidden', null)
      .text(`${who}: ${labels.join('; ')}: ${simulated[0].simulated.meaning}.`);
  }

  function drawSummary() {
    const peak = data.peak;
    d3.select('#subtitle').text(`${data.ranks.length} traces` +
      (data.job_id ? ` of job '${data.job_id}'` : '') +
      (data.world_size >= 0 ? `, world size ${data.world_size}` : ''));
    const rows = [
      ['Peak rank', `${peak.label}: ${humanBytes(peak.bytes)} (${peak.bytes} bytes)`],
      ['Over the median', data.over_median],
      ['Clocks', `aligned ${data.clocks.how}`],
    ];
    if (data.missing_ranks.length) rows.push(['No trace of', data.missing_ranks.map(r => `rank ${r}`).join(', ')]);
    for (const path of data.earlier_attempts) rows.push(['Restarted', `${path}: an earlier attempt, set aside`]);
    const summary = d3.select('#summary');
    for (const [term, value] of rows) {
      summary.append('dt').text(term);
      summary.append('dd').text(value);
    }
  }

  function drawRanks() {
    const table = d3.select('#ranks');
    const header = ['Rank', 'Local', 'Host', 'Peak', 'At', 'Step', 'Phase', 'Module', 'Line'];
    table.append('tr').selectAll('th').data(header).enter().append('th').text(d => d);
    data.ranks.forEach((rank, index) => {
      const row = table.append('tr').classed('peak-rank', index === data.peak.index);
      const cells = [rank.label, rank.local_rank === undefined ? '-' : rank.local_rank, rank.host || '-',
        humanBytes(rank.peak_bytes), seconds(rank.job_peak_time_ns), rank.step === null ? '-' : rank.step,
        rank.phase || '-', rank.module || '-', rank.line || '-'];
      row.selectAll('td').data(cells).enter().append('td').text(d => d);
    });
  }

  // One chart per rank, all sharing the x scale (the job's time) and the y scale (bytes), so
  // that heights and times compare across ranks at a glance.
  function drawTimelines() {
    d3.select('#clocks').text(`Clocks aligned ${data.clocks.how}. Every chart shares the time axis and ` +
      'the byte scale; the red dot is the rank\'s peak.');
    const width = Math.max(360, d3.select('#timelines').node().clientWidth || 1000);
    const height = 90;
    const margin = {left: 90, right: 20, top: 6, bottom: 18};
    let end = 1e-9;
    let highest = 1;
    data.timelines.forEach((tl, index) => {
      end = Math.max(end, (data.ranks[index].offset_ns + tl.duration_ns) / 1e9);
      highest = Math.max(highest, d3.max(tl.bytes) || 0);
    });
    const x = d3.scaleLinear().domain([0, end]).range([margin.left, width - margin.right]);
    const y = d3.scaleLinear().domain([0, highest]).nice().range([height - margin.bottom, margin.top]);
    data.timelines.forEach((tl, index) => {
      const rank = data.ranks[index];
      const offset = rank.offset_ns / 1e9;
      const points = tl.time_ns.map((t, i) => [offset + t / 1e9, tl.bytes[i]]);
      if (points.length) points.push([offset + tl.duration_ns / 1e9, points[points.length - 1][1]]);
      const svg = d3.select('#timelines').append('svg').attr('width', width).attr('height', height)
        .attr('class', 'rank-timeline').attr('data-rank', rank.label);
      svg.append('text').attr('x', 4).attr('y', height / 2).attr('class', 'rank-label').text(rank.label);
      svg.append('path').datum(points).attr('class', 'rank-area')
        .attr('fill', index === data.peak.index ? '#e15759' : '#4e79a7').attr('opacity', 0.6)
        .attr('d', d3.area().curve(d3.curveStepAfter).x(d => x(d[0])).y0(y(0)).y1(d => y(d[1])));
      svg.append('g').attr('class', 'axis').attr('transform', `translate(0,${height - margin.bottom})`)
        .call(d3.axisBottom(x).ticks(8).tickFormat(t => `${t} s`));
      svg.append('g').attr('class', 'axis').attr('transform', `translate(${margin.left},0)`)
        .call(d3.axisLeft(y).ticks(2).tickFormat(humanBytes));
      svg.append('circle').attr('class', 'rank-peak').attr('r', 4).attr('fill', '#d62728')
        .attr('cx', x(rank.job_peak_time_ns / 1e9)).attr('cy', y(rank.peak_bytes))
        .on('mousemove', () => showTooltip(`${rank.label}: peak ${humanBytes(rank.peak_bytes)} at ` +
          `${seconds(rank.job_peak_time_ns)}\n${rank.line || ''}`))
        .on('mouseleave', hideTooltip);
    });
  }

  // Note [The job's module table] (tracer/report/job.h): every rank's bytes by module at its own
  // peak, joined by module, the module whose share differs most named above; sortable by any
  // column (sortable_table.js).
  function drawModules() {
    const modules = data.modules;
    if (!modules || !modules.rows.length) return;
    d3.select('#modules-section').attr('hidden', null);
    d3.select('#modules-differs').text(modules.differs_most
      ? `Differs most between ranks: ${modules.differs_most.text}.`
      : 'Every module\'s share of the peak is the same on every rank (within 0.1 point).');
    const columns = data.ranks.map((rank, index) => ({title: rank.label, key: row => row.bytes[index], number: true}))
      .concat([{title: 'Module', key: row => row.location, number: false}]);
    sortableTable(d3.select('#modules'), columns, modules.rows,
      {column: data.ranks[data.peak.index].label, descending: true}, (tr, row) => {
        tr.attr('data-module', row.location);
        for (const value of row.bytes)
          tr.append('td').attr('class', 'number').attr('data-bytes', value).text(value ? humanBytes(value) : '-');
        tr.append('td').attr('class', 'location').text(row.location);
      });
  }

  function drawRows() {
    const table = d3.select('#rows');
    const peak = data.ranks[data.peak.index];
    d3.select('#table-title').text(`Live at ${peak.label}'s peak, by ${data.table.group_by}, beside the ` +
      'other ranks\' figures at theirs');
    const header = data.ranks.map(rank => rank.label).concat(['Location']);
    table.append('tr').selectAll('th').data(header).enter().append('th').text(d => d);
    for (const entry of data.table.rows) {
      const cells = entry.bytes.map(b => (b === null ? '-' : humanBytes(b))).concat([entry.location]);
      table.append('tr').selectAll('td').data(cells).enter().append('td').text(d => d);
    }
  }

  try {
    drawSimulated();
    drawSummary();
    drawRanks();
    drawTimelines();
    drawModules();
    drawRows();
    document.body.setAttribute('data-ready', '1');
  } catch (error) {
    d3.select('#error').attr('hidden', null).text(`The page could not be drawn: ${error}`);
  }
})();
