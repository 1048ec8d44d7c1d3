// The dry-run back-end: counts what it is given and writes nothing.
#include <memory>
#include <string>

#include "iotest/storage/backend.hpp"
#include "iotest/storage/registry.hpp"

namespace iotest::storage {
namespace {

class NullBackend final : public Backend {
 public:
  void abort() noexcept override {}
  std::string_view name() const override { return "null"; }
  std::string durability() const override { return "nothing written"; }

 protected:
  void do_open(const std::string&) override {}
  void do_write_chunk(const ChunkKey&, const cplx*, bool, const PresenceWord*) override {}
  void do_flush() override {}
  void do_close() override {}
};

}  // namespace

BackendSpec null_spec() {
  BackendSpec s;
  s.name = "null";
  s.summary = "a dry run: counts what it is given, writes nothing";
  s.make = [](const StorageOptions&) -> std::unique_ptr<Backend> {
    return std::make_unique<NullBackend>();
  };
  return s;
}

}  // namespace iotest::storage
