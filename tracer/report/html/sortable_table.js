// A table sortable by any column: a click on a title sorts by it, largest first for a column of
// numbers (A to Z for text), and a second click reverses. Inlined ahead of each page's script
// (writePage in render_html.cpp), after bytes.js: the report's module x category table and the
// job's module table both draw through it.
//
// sortableTable(element, columns, rows, sorted, drawRow):
//   element  a d3 selection of an empty <table>: a <thead> and a <tbody> are appended to it
//   columns  [{title, key: row => value, number: bool}]: the titles, and what each sorts on
//   rows     the data, one entry a row
//   sorted   {column: title, descending: bool}: the order it is first drawn in
//   drawRow  (tr, row) => ...: fills a row's cells
// The titles carry aria-sort and the table data-sorted ("Total descending"), which the views'
// tests read. Returns the <tbody>'s selection.
function sortableTable(element, columns, rows, sorted, drawRow) {
  const headers = element.append('thead').append('tr').selectAll('th').data(columns).enter()
    .append('th').attr('class', 'sortable').attr('data-column', d => d.title).text(d => d.title);
  const body = element.append('tbody');
  let order = sorted;
  function draw() {
    const column = columns.find(c => c.title === order.column);
    const sign = order.descending ? -1 : 1;
    const ordered = rows.slice().sort((a, b) => {
      const x = column.key(a), y = column.key(b);
      return sign * (column.number ? x - y : (x < y ? -1 : x > y ? 1 : 0));
    });
    body.selectAll('tr').remove();
    for (const row of ordered) drawRow(body.append('tr'), row);
    headers.attr('aria-sort', d => d.title !== order.column ? 'none'
      : order.descending ? 'descending' : 'ascending');
    element.attr('data-sorted', `${order.column} ${order.descending ? 'descending' : 'ascending'}`);
  }
  headers.on('click', d => {
    order = d.title === order.column ? {column: d.title, descending: !order.descending}
      : {column: d.title, descending: d.number};
    draw();
  });
  draw();
  return body;
}
