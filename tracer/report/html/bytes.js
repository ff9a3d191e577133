// Bytes as formatBytes() in tracer/common/byte_format.h writes them: four significant digits.
// Inlined ahead of each page's script (writePage) and of the SVG flame graph's
// (render_flame.cpp), which all call it: its 'use strict' heads the script they make.
'use strict';

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

function humanBytes(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = value >= 100 ? 1 : value >= 10 ? 2 : 3;
  return `${value.toFixed(digits)} ${BYTE_UNITS[unit]}`;
}
