// Renderers of a job read as one (job.h) and of two traces compared (diff.h): text for
// people, JSON for programs, CSV for spreadsheets, and the job's HTML page.
#pragma once

#include <cstddef>
#include <ostream>

#include "tracer/report/diff.h"
#include "tracer/report/job.h"

namespace memtrace::report {

void renderJobText(std::ostream& out, const JobReport& job, size_t top);
void renderJobJson(std::ostream& out, const JobReport& job, size_t top);
// Long form: one line per rank and row of the peak rank's table (the rank's peak repeated on
// each), so that a spreadsheet can pivot it either way.
void renderJobCsv(std::ostream& out, const JobReport& job, size_t top);
// One self-contained page: the ranks' peaks, one timeline per rank on the job's time axis, and
// the peak rank's table beside the others'. The job's ranks must have their timelines.
void renderJobHtml(std::ostream& out, const JobReport& job, size_t top);

// `fail_over`: the threshold the exit status checks, as the user wrote it ("" when none), and
// whether B's peak went over it.
struct DiffVerdict {
  std::string threshold;
  bool over = false;
};
void renderDiffText(std::ostream& out, const TraceDiff& diff, size_t top,
                    const DiffVerdict& verdict);
void renderDiffJson(std::ostream& out, const TraceDiff& diff, size_t top,
                    const DiffVerdict& verdict);

}  // namespace memtrace::report
