// The dry-run back-end: counts what it is given and writes nothing.
#include "iotest/common/errors.hpp"
#include "iotest/storage/backend.hpp"

namespace iotest::storage {
namespace {

class NullBackend final : public Backend {
 public:
  void open(const std::string&, const VisibilityLayout& layout) override { layout_ = layout; }
  void write(index_t baseline, index_t t0, index_t nt, index_t c0, index_t nc,
             const cplx*) override {
    account(layout_, baseline, t0, nt, c0, nc);
  }
  void close() override {}
  void abort() noexcept override {}
  std::string_view name() const override { return "null"; }

 private:
  VisibilityLayout layout_;
};

}  // namespace

void Backend::account(const VisibilityLayout& layout, index_t baseline, index_t t0, index_t nt,
                      index_t c0, index_t nc) {
  ++stats_.writes;
  stats_.bytes += nt * nc * static_cast<index_t>(sizeof(cplx));
  for (index_t tc = t0 / layout.time_chunk; tc <= (t0 + nt - 1) / layout.time_chunk; ++tc)
    for (index_t fc = c0 / layout.freq_chunk; fc <= (c0 + nc - 1) / layout.freq_chunk; ++fc)
      chunks_.insert((baseline * layout.times + tc) * layout.channels + fc);
  stats_.chunks_touched = static_cast<index_t>(chunks_.size());
}

std::unique_ptr<Backend> make_hdf5_backend();  // hdf5_backend.cpp

std::unique_ptr<Backend> make_backend(std::string_view name) {
  if (name == "null") return std::make_unique<NullBackend>();
  if (name == "hdf5") return make_hdf5_backend();
  throw UsageError("--backend", "expected null or hdf5, got '" + std::string(name) + "'");
}

VisibilityLayout layout_of(const telescope::Observation& obs) {
  VisibilityLayout layout;
  layout.observation = &obs;
  layout.baselines = obs.baseline_count();
  layout.times = obs.time.steps;
  layout.channels = obs.freq.steps;
  layout.time_chunk = obs.time.chunk;
  layout.freq_chunk = obs.freq.chunk;
  return layout;
}

}  // namespace iotest::storage
