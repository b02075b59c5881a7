// The trainer's outputs for people: the metrics CSV and a PNG of the curves drawn by gnuplot.
#pragma once

#include <string>
#include <vector>

#include "samples/fashion_mnist/trainer.h"

namespace minidl::fashion_mnist {

// Writes (replacing) `path`: a header "epoch,train_loss,test_loss,test_acc,samples_per_s,lr"
// and one row per epoch. Throws a minidl::Error naming the file when it cannot be written.
void write_metrics_csv(const std::string& path, const std::vector<EpochMetrics>& history);

// Draws train/test loss and test accuracy against the epoch into `png_path` with gnuplot.
// Returns "" on success, else why no plot was drawn (gnuplot not installed, or it failed):
// the trainer prints that and carries on.
std::string plot_metrics(const std::string& png_path, const std::vector<EpochMetrics>& history);

// The first executable `name` on $PATH, or "" when there is none.
std::string find_on_path(const std::string& name);

}  // namespace minidl::fashion_mnist
