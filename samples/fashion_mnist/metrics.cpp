// Metrics CSV and the gnuplot figure. The CSV rows use the shortest exact form of each double,
// so two runs' files compare equal exactly when their numbers do. The figure is drawn by
// piping a script (data inline as a datablock) into gnuplot; no shell sees the output's name.
#include "samples/fashion_mnist/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

#include "io/checkpoint.h"

namespace minidl::fashion_mnist {

namespace {
// A gnuplot single-quoted string: no escapes inside, a quote is written twice.
std::string gnuplot_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}
}  // namespace

void write_metrics_csv(const std::string& path, const std::vector<EpochMetrics>& history) {
  std::ofstream f(path, std::ios::trunc);
  MINIDL_CHECK(f.good(), "metrics: cannot open ", path, " for writing");
  f << "epoch,train_loss,test_loss,test_acc,samples_per_s,lr\n";
  for (const EpochMetrics& e : history) {
    f << e.epoch << "," << io::format_exact(e.train_loss) << "," << io::format_exact(e.test_loss) << ","
      << io::format_exact(e.test_acc) << "," << io::format_exact(e.samples_per_s) << "," << io::format_exact(e.lr) << "\n";
  }
  f.close();
  MINIDL_CHECK(!f.fail(), "metrics: writing ", path, " failed");
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string plot_metrics(const std::string& png_path, const std::vector<EpochMetrics>& history) {
  const std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty()) return "gnuplot is not installed (Debian: apt-get install gnuplot-nox); no plot drawn";
  if (history.empty()) return "no finished epoch to plot";

  std::ostringstream script;
  script << "$metrics << EOD\n";
  for (const EpochMetrics& e : history)
    script << e.epoch << " " << e.train_loss << " " << e.test_loss << " " << 100 * e.test_acc << "\n";
  script << "EOD\n"
         << "set terminal pngcairo size 1100,450 font ',10'\n"
         << "set output " << gnuplot_quoted(png_path) << "\n"
         << "set multiplot layout 1,2 title 'minidl: Fashion-MNIST MLP'\n"
         << "set xlabel 'epoch'\nset grid\nset key top right\n"
         << (history.size() <= 20 ? "set xtics 1\n" : "")
         << "set title 'loss'\nset ylabel 'cross-entropy'\n"
         << "plot $metrics using 1:2 with linespoints title 'train', $metrics using 1:3 with linespoints title 'test'\n"
         << "set title 'test accuracy'\nset ylabel '%'\nset key bottom right\n"
         << "plot $metrics using 1:4 with linespoints title 'test accuracy'\n"
         << "unset multiplot\nset output\n";

  // The shell popen starts sees only gnuplot's own path, single-quoted; the script (with the
  // output file's name) goes to its stdin.
  if (gnuplot.find('\'') != std::string::npos) return "gnuplot's path " + gnuplot + " has a quote in it; no plot drawn";
  std::FILE* pipe = popen(("'" + gnuplot + "' 2>&1").c_str(), "w");
  if (!pipe) return "could not start " + gnuplot;
  const std::string text = script.str();
  const bool written = std::fwrite(text.data(), 1, text.size(), pipe) == text.size();
  const int status = pclose(pipe);
  if (!written || status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "gnuplot failed drawing " + png_path + " (exit status " + std::to_string(status) + ")";
  return "";
}

}  // namespace minidl::fashion_mnist
