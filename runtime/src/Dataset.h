//===- Dataset.h - Feeds read a batch at a time -----------------*- C++ -*-===//
//
// Why: a training set is larger than memory. `--data` names an .npz file, a folder of
// .npz shards (or of NAME.npy arrays, one per input) or a glob of shards; the loop
// reads one batch at a time (stored members and .npy files by offset, never whole;
// a deflated member is inflated once per visit of its shard), a bounded number of
// batches ahead on a thread of its own, so memory stays flat however large the data.
//
// A shard's array for an input is either one batch (the input's shape: reused for
// every batch of the shard) or K batches (one extra leading dimension). The dataset
// is the shards' batches in order (shards sorted by path); an epoch visits each once,
// in order or in a permutation drawn from (--shuffle seed, epoch), so that where a
// run is follows from how many micro-batches it has consumed: a resumed run reads
// what an unbroken one would.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_DATASET_H
#define ORTC_RUNTIME_DATASET_H

#include "Npz.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ortc {

/// Converts a float array to f32/f64, or an integer array to i64/i32 (range checked).
/// Returns false (and sets `error` only on overflow) when the kinds differ.
bool convertFeed(const npz::Array &a, const std::string &dtype, std::string &out,
                 std::string &error);

/// A tensor the feed fills.
struct FeedInput {
  std::string name, role, dtype;
  std::vector<int64_t> shape;
  size_t bytes = 0;
};

class Dataset {
public:
  /// Finds the files of `spec` (file, folder or glob) and reads their directories.
  bool open(const std::string &spec, std::string &error);
  /// Matches every input with the shards' arrays (shape, convertible dtype, the same
  /// number of batches within a shard). `what` names the step for messages.
  bool bind(const std::vector<FeedInput> &inputs, const std::string &what, std::string &error);
  /// Batches in one pass over the data.
  int64_t batches() const { return total; }
  /// Reads batch `b` (0 <= b < batches()): one buffer per bound input, in its dtype.
  bool read(int64_t b, std::vector<std::string> &out, std::string &error);
  /// "batch 3 of 10 in the feed" or, with shards, "batch 2 of shard2.npz".
  std::string where(int64_t b) const;
  /// The names of the arrays of the first shard, for messages.
  std::string arrayNames() const;
  const std::string &spec() const { return path; }

private:
  struct Shard {
    std::string path;
    std::vector<npz::Member> members;
    int64_t batches = 1, first = 0;
    std::vector<int> member;    ///< per bound input: index into members
    std::vector<bool> sequence; ///< per bound input: K batches (else one, reused)
  };
  std::string path;
  std::vector<Shard> shards;
  std::vector<FeedInput> inputs;
  int64_t total = 0;
  /// Deflated members of the shard last read, inflated whole.
  int cachedShard = -1;
  std::map<int, npz::Array> inflated;
  /// The .npy arrays of a folder feed, mapped at their first read.
  std::map<std::string, std::unique_ptr<npz::MappedNpy>> mapped;
};

/// Which batch micro-batch `m` (counted from the start of training) reads: epoch m / K,
/// position m % K, through a Fisher-Yates permutation of (seed, epoch) when shuffling.
/// Rank r of a data-parallel run of `ranks` reads the rank-strided share: its
/// micro-batch m is micro-batch m * ranks + r of the whole run, so the ranks' batches
/// of one step are consecutive batches of the feed (one process with `ranks` times the
/// batch would read their concatenation).
class BatchOrder {
public:
  BatchOrder(int64_t batches, bool shuffle, uint64_t seed, int64_t ranks = 1, int64_t rank = 0)
      : k(batches), shuffle(shuffle), seed(seed), ranks(ranks), rank(rank) {}
  int64_t operator()(int64_t m);

private:
  int64_t k;
  bool shuffle;
  uint64_t seed;
  int64_t ranks, rank;
  int64_t epoch = -1;
  std::vector<int64_t> perm;
};

/// Reads the batches of micro-batches m, m+1, ... on a thread of its own, `depth` ahead
/// of the one the loop takes. Calls to take() must ask for consecutive m.
class Prefetcher {
public:
  Prefetcher(Dataset &data, BatchOrder order, int depth = 2)
      : data(data), order(std::move(order)), depth(depth) {}
  ~Prefetcher();
  /// The batch of micro-batch `m` (waits for it); false with `error` if reading failed.
  bool take(int64_t m, std::vector<std::string> &out, int64_t &batch, std::string &error);

private:
  struct Item {
    int64_t m, batch;
    std::vector<std::string> buffers;
    std::string error;
  };
  void work();
  Dataset &data;
  BatchOrder order;
  int depth;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> ready;
  int64_t next = 0, wanted = -1;
  bool started = false, stopping = false;
};

} // namespace ortc

#endif // ORTC_RUNTIME_DATASET_H
