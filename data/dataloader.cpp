// DataLoader: epoch bookkeeping, in-order delivery, and the prefetching worker threads.
#include "data/dataloader.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/memory.h"
#include "core/profiler.h"
#include "core/start_thread.h"

namespace minidl::data {

// One pass over the dataset. Without workers, batches are built on demand in the consumer's
// thread; with workers, worker w builds batches w, w + W, w + 2W, ... and parks each in
// `ready` until the consumer takes it.
struct DataLoader::Epoch {
  const Dataset* dataset = nullptr;
  std::vector<int64_t> order;
  int64_t batch_size = 1;
  int64_t num_batches = 0;
  bool pin_memory = false;
  Batch current;
  int64_t current_index = -1;

  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable produced, consumed;
  std::map<int64_t, Batch> ready;
  std::map<int64_t, std::exception_ptr> failed;
  int64_t next_to_take = 0;
  int64_t window = 0;  // how far ahead of the consumer workers may run
  bool stopping = false;

  std::vector<int64_t> scratch;  // the consumer's index buffer, reused batch after batch

  // Fills `indices` (reusing its capacity, so a steady epoch allocates only the batch
  // tensors) with batch b's slice of the order and builds the batch.
  Batch build(int64_t b, std::vector<int64_t>& indices) const {
    // b < num_batches, so begin < order.size(); the end is capped without adding batch_size to
    // begin (which overflows when batch_size is near INT64_MAX).
    const auto n = static_cast<int64_t>(order.size());
    const int64_t begin = b * batch_size;
    const int64_t end = begin + std::min(batch_size, n - begin);
    indices.assign(order.begin() + begin, order.begin() + end);
    NoGradGuard no_grad;
    Batch batch = dataset->get_batch(indices);
    if (pin_memory) {
      batch.x = minidl::pin_memory(batch.x);
      batch.y = minidl::pin_memory(batch.y);
    }
    return batch;
  }

  // Workers start at batch `first` (a resumed epoch skips the batches before it). A failure to
  // start one is a minidl::Error; the destructor then stops and joins those already started.
  void start_workers(int count, int64_t first) {
    window = 2 * static_cast<int64_t>(count);
    next_to_take = first;
    for (int w = 0; w < count; ++w) {
      const std::string who = "DataLoader: worker " + std::to_string(w) + " of " + std::to_string(count);
      workers.push_back(start_thread(who, [this, w, count, first] {
        std::vector<int64_t> indices;
        for (int64_t b = first + w; b < num_batches; b += count) {
          {
            std::unique_lock<std::mutex> lock(mutex);
            consumed.wait(lock, [&] { return stopping || b < next_to_take + window; });
            if (stopping) return;
          }
          Batch batch;
          std::exception_ptr error;
          try {
            batch = build(b, indices);
          } catch (...) {
            error = std::current_exception();
          }
          {
            std::lock_guard<std::mutex> lock(mutex);
            if (error) failed[b] = std::move(error);  // moved: the worker keeps no reference
            else ready[b] = std::move(batch);
          }
          produced.notify_all();
        }
      }));
    }
  }

  void load(int64_t b) {
    profiler::RecordScope profile_scope("DataLoader.next", profiler::Kind::DataLoader);
    if (workers.empty()) {
      current = build(b, scratch);
    } else {
      std::unique_lock<std::mutex> lock(mutex);
      produced.wait(lock, [&] { return ready.count(b) > 0 || failed.count(b) > 0; });
      if (auto it = failed.find(b); it != failed.end()) {
        std::exception_ptr e = it->second;
        failed.erase(it);
        std::rethrow_exception(e);
      }
      current = std::move(ready[b]);
      ready.erase(b);
      next_to_take = b + 1;
      lock.unlock();
      consumed.notify_all();
    }
    current_index = b;
  }

  ~Epoch() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    consumed.notify_all();
    for (auto& t : workers) t.join();
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  MINIDL_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  MINIDL_CHECK(options_.batch_size > 0, "DataLoader: batch_size must be positive, got ", options_.batch_size);
  MINIDL_CHECK(options_.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ", options_.num_workers);
  MINIDL_CHECK(dataset_->size() > 0, "DataLoader: the dataset is empty");
  MINIDL_CHECK(!options_.pin_memory || cuda_is_available(),
               "DataLoader: pin_memory=true needs a CUDA device (pinned host memory is for copies to a GPU); "
               "this build or machine has none");
  if (options_.shuffle) sampler_ = std::make_unique<RandomSampler>(dataset_->size(), options_.seed);
  else sampler_ = std::make_unique<SequentialSampler>(dataset_->size());
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::size() const {
  // Not (n + b - 1) / b: that overflows for a batch size near INT64_MAX, which must give one
  // batch of everything (PyTorch: a batch larger than the dataset is the whole dataset).
  const int64_t n = dataset_->size(), b = options_.batch_size;
  return n / b + (!options_.drop_last && n % b != 0 ? 1 : 0);
}

DataLoader::Iterator DataLoader::begin() {
  current_.reset();  // stops the workers of an unfinished previous epoch
  auto epoch = std::make_unique<Epoch>();
  epoch->dataset = dataset_.get();
  epoch->order = sampler_->indices(next_epoch_);
  epoch->batch_size = options_.batch_size;
  epoch->pin_memory = options_.pin_memory;
  epoch->num_batches = size();
  const int64_t first = next_first_batch_;
  // No more workers than batches left to build: the others would start only to exit. If one
  // cannot start, the epoch is destroyed (joining the rest) and the loader keeps its position.
  const int64_t left = std::max<int64_t>(epoch->num_batches - first, 0);
  const int workers = static_cast<int>(std::min<int64_t>(options_.num_workers, left));
  if (workers > 0) epoch->start_workers(workers, first);
  current_epoch_ = next_epoch_++;
  next_first_batch_ = 0;
  current_ = std::move(epoch);
  if (first < current_->num_batches) current_->load(first);
  return Iterator(current_.get(), first < current_->num_batches ? first : -1);
}

DataLoaderState DataLoader::state() const {
  DataLoaderState s;
  s.seed = options_.seed;
  s.shuffle = options_.shuffle;
  s.drop_last = options_.drop_last;
  s.batch_size = options_.batch_size;
  s.dataset_size = dataset_->size();
  const int64_t delivered = current_ && current_->current_index >= 0 ? current_->current_index + 1 : 0;
  if (current_ && delivered > 0 && delivered < current_->num_batches) {
    s.epoch = current_epoch_;
    s.batch = delivered;
  } else {  // nothing begun yet, or the epoch delivered all its batches (or had none)
    s.epoch = next_epoch_;
    s.batch = next_first_batch_;
  }
  return s;
}

void DataLoader::load_state(const DataLoaderState& s) {
  const DataLoaderState own = state();
  MINIDL_CHECK(s.seed == own.seed && s.shuffle == own.shuffle && s.drop_last == own.drop_last &&
                   s.batch_size == own.batch_size && s.dataset_size == own.dataset_size,
               "DataLoader: load_state: the state was saved by a loader with seed ", s.seed, ", shuffle ", s.shuffle,
               ", drop_last ", s.drop_last, ", batch_size ", s.batch_size, " over ", s.dataset_size,
               " examples; this loader has seed ", own.seed, ", shuffle ", own.shuffle, ", drop_last ", own.drop_last,
               ", batch_size ", own.batch_size, " over ", own.dataset_size, " examples");
  MINIDL_CHECK(s.epoch >= 0, "DataLoader: load_state: negative epoch ", s.epoch);
  MINIDL_CHECK(s.batch == 0 || (s.batch > 0 && s.batch < size()), "DataLoader: load_state: batch ", s.batch,
               " is out of range (an epoch has ", size(), " batches)");
  current_.reset();  // an epoch in progress ends here, like at begin()
  next_epoch_ = s.epoch;
  next_first_batch_ = s.batch;
}

DataLoader::Iterator DataLoader::end() { return Iterator(current_.get(), -1); }

Batch& DataLoader::Iterator::operator*() const {
  MINIDL_CHECK(epoch_ != nullptr && batch_ >= 0, "DataLoader: dereferencing an end iterator");
  return epoch_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  const int64_t next = batch_ + 1;
  if (next >= epoch_->num_batches) {
    batch_ = -1;
  } else {
    epoch_->load(next);
    batch_ = next;
  }
  return *this;
}

}  // namespace minidl::data
