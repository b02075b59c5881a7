// DataLoader: batches of a Dataset in sampler order, as a range: `for (Batch& b : loader)`.
// Each begin() starts the next epoch (0, 1, 2, ...; set_epoch overrides), so a shuffled
// loader visits a new seeded order every epoch. With num_workers > 0, worker threads build
// batches ahead of the consumer (at most 2 per worker in flight) and hand them over in
// order, so the batches are exactly those of num_workers = 0. One epoch runs at a time:
// begin() ends the previous epoch (joining its workers), and its iterators become invalid.
// state()/load_state() carry the loader's position (epoch, next batch) through a checkpoint:
// the order of an epoch is a function of (seed, epoch), so the position is all a resumed
// loader needs to deliver exactly the batches the interrupted one would have.
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
  // Batches headed to a GPU: build each in pinned host memory (on the worker threads when there
  // are workers), so that x.to(cuda) is an asynchronous DMA. Needs CUDA; an error without it.
  bool pin_memory = false;
};

// Where a loader stands: the next batch it delivers is batch `batch` of epoch `epoch`
// (0 <= batch < batches per epoch). The other fields say what that position means; a loader
// whose options or dataset size differ refuses it.
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t batch = 0;
  uint64_t seed = 0;
  bool shuffle = false;
  bool drop_last = false;
  int64_t batch_size = 1;
  int64_t dataset_size = 0;
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

  // Starts the next epoch (at the batch load_state set, else at batch 0), with at most one
  // worker per batch left. A worker thread the system refuses is a minidl::Error, after which
  // the loader stands where it stood (the next begin() starts the same epoch).
  Iterator begin();
  Iterator end();
  int64_t size() const;  // batches per epoch (a batch_size beyond the dataset: 1, or 0 with drop_last)
  void set_epoch(int64_t epoch) { next_epoch_ = epoch; }  // the next begin() starts this epoch
  int64_t epoch() const { return current_epoch_; }       // the epoch last started (-1 before any)

  // The position after the batch delivered last (the one the current iterator points at) has
  // been used: save it after the training step of that batch. Before any epoch, or once the
  // epoch's last batch was delivered, it is batch 0 of the next epoch.
  DataLoaderState state() const;
  // The next begin() starts epoch s.epoch at batch s.batch; the batches before it are skipped
  // without being built. Throws (changing nothing) when s was saved by a loader with another
  // seed, shuffle, drop_last, batch size or dataset size, or when the batch is out of range.
  void load_state(const DataLoaderState& s);
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::unique_ptr<Sampler> sampler_;
  int64_t next_epoch_ = 0;
  int64_t next_first_batch_ = 0;  // where the next begin() starts (load_state)
  int64_t current_epoch_ = -1;
  std::unique_ptr<Epoch> current_;
};

}  // namespace minidl::data
