// `memtrace-report parse trace.bin`: every record of the file as one line of text, in file
// order. The tests read it to check exact event sequences.
#pragma once

#include <ostream>

#include "tracer/reader/reader.h"

namespace memtrace::report {

void printRecords(reader::TraceReader& trace, std::ostream& out);

}  // namespace memtrace::report
