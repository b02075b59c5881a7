// DataLoader: batches of a Dataset in sampler order, as a range: `for (Batch& b : loader)`.
// Each begin() starts the next epoch (0, 1, 2, ...; set_epoch overrides), so a shuffled
// loader visits a new seeded order every epoch. With num_workers > 0, worker threads build
// batches ahead of the consumer (at most 2 per worker in flight) and hand them over in
// order, so the batches are exactly those of num_workers = 0. One epoch runs at a time:
// begin() ends the previous epoch (joining its workers), and its iterators become invalid.
#pragma once

#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"

namespace minidl::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  int num_workers = 0;
  uint64_t seed = 0;
};

class DataLoader {
  struct Epoch;

 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  class Iterator {
   public:
    Batch& operator*() const;
    Batch* operator->() const { return &**this; }
    Iterator& operator++();
    bool operator!=(const Iterator& other) const { return batch_ != other.batch_; }
    bool operator==(const Iterator& other) const { return batch_ == other.batch_; }

   private:
    friend class DataLoader;
    Iterator(Epoch* epoch, int64_t batch) : epoch_(epoch), batch_(batch) {}
    Epoch* epoch_;
    int64_t batch_;
  };

  Iterator begin();  // starts the next epoch
  Iterator end();
  int64_t size() const;  // batches per epoch
  void set_epoch(int64_t epoch) { next_epoch_ = epoch; }  // the next begin() starts this epoch
  int64_t epoch() const { return current_epoch_; }       // the epoch last started (-1 before any)
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::unique_ptr<Sampler> sampler_;
  int64_t next_epoch_ = 0;
  int64_t current_epoch_ = -1;
  std::unique_ptr<Epoch> current_;
};

}  // namespace minidl::data
