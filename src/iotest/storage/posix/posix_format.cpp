// The posix format's bytes (posix_format.hpp describes them): the header and
// trailer a writer lays down, and the reader of them over a ByteRanges.
#include "iotest/storage/posix/posix_format.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>

#include "iotest/common/errors.hpp"
#include "iotest/storage/provenance_json.hpp"

namespace iotest::storage::posix_format {
namespace {

using nlohmann::json;

// Values are written as they lie in memory.
static_assert(std::endian::native == std::endian::little, "the posix format is little-endian");

constexpr char kMagic[] = "IOTEST-POSIX-1\n";
constexpr std::size_t kMagicBytes = sizeof(kMagic) - 1;
constexpr char kFooterMagic[] = "IOTEST-POSIX-END";
constexpr std::size_t kFooterMagicBytes = sizeof(kFooterMagic) - 1;
constexpr std::int64_t kCplxBytes = static_cast<std::int64_t>(sizeof(cplx));

void put_i64(char* at, std::int64_t v) {
  std::memcpy(at, &v, sizeof v);
}
std::int64_t get_i64(const char* at) {
  std::int64_t v = 0;
  std::memcpy(&v, at, sizeof v);
  return v;
}

// `part`'s bits into `into`'s: a chunk's disjoint parts make the chunk.
void xor_into(void* into, const void* part, std::int64_t bytes) {
  auto* a = static_cast<unsigned char*>(into);
  const auto* b = static_cast<const unsigned char*>(part);
  for (std::int64_t i = 0; i < bytes; ++i) a[i] ^= b[i];
}

json describe(const VisibilityLayout& layout, std::size_t slots, std::int64_t chunk_bytes,
              std::int64_t slot_bytes, const std::vector<WrittenPart>& written_parts,
              const std::vector<ChunkChecksum>& checksums, bool parts_in_slots) {
  if (!layout.observation) throw std::logic_error("the posix format needs the observation");
  const auto& obs = *layout.observation;
  json doc;
  doc["format"] = "iotest-posix";
  doc["version"] = 1;
  doc["layout"] = {{"baselines", layout.baselines},
                   {"times", layout.times},
                   {"channels", layout.channels},
                   {"time_chunk", layout.time_chunk},
                   {"freq_chunk", layout.freq_chunk}};
  doc["chunk_bytes"] = chunk_bytes;
  doc["slot_bytes"] = slot_bytes;
  doc["slots"] = slots;
  std::vector<double> freq;
  for (index_t k = 0; k < layout.channels; ++k) freq.push_back(obs.freq.at(k));
  doc["frequencies_hz"] = freq;
  // The observation as written (what a run's Provenance::observation
  // holds, present also without provenance): (u, v, w) are rebuilt from it.
  doc["observation"] =
      observation_options_json({obs.vis_set, obs.time.text(), obs.freq.text(), obs.dec_deg});
  doc["provenance"] = layout.provenance ? provenance_json(*layout.provenance) : json(nullptr);
  json parts = json::array();
  for (const auto& p : written_parts)
    parts.push_back(json::array({p.w_stack, p.subgrid, p.row_chunk_begin, p.row_chunk_end}));
  doc["written_parts"] = std::move(parts);
  json sums = json::array();
  for (const auto& c : checksums) sums.push_back(json::array({c.chunk, c.crc32}));
  doc["chunk_crc32"] = std::move(sums);
  // Only where true: the posix back-end's files stay as they were.
  if (parts_in_slots) doc["parts_in_slots"] = true;
  return doc;
}

}  // namespace

std::int64_t slot_bytes_for(std::int64_t chunk_bytes) {
  return (chunk_bytes + kBlock - 1) / kBlock * kBlock;
}

std::array<char, kHeaderBytes> header(std::int64_t chunk_bytes, std::int64_t slot_bytes) {
  std::array<char, kHeaderBytes> bytes{};
  std::memcpy(bytes.data(), kMagic, kMagicBytes);
  put_i64(bytes.data() + 16, kHeaderBytes);
  put_i64(bytes.data() + 24, chunk_bytes);
  put_i64(bytes.data() + 32, slot_bytes);
  return bytes;
}

std::vector<char> trailer(const VisibilityLayout& layout, const std::vector<std::int64_t>& index,
                          std::int64_t chunk_bytes, std::int64_t slot_bytes,
                          const std::vector<WrittenPart>& parts,
                          const std::vector<ChunkChecksum>& checksums, bool parts_in_slots) {
  const auto slots = static_cast<std::int64_t>(index.size());
  const std::int64_t index_offset = slot_offset(slots, slot_bytes);
  const std::int64_t index_bytes = slots * static_cast<std::int64_t>(sizeof(std::int64_t));
  const std::string text =
      describe(layout, index.size(), chunk_bytes, slot_bytes, parts, checksums, parts_in_slots)
          .dump();
  const auto text_bytes = static_cast<std::int64_t>(text.size());
  std::vector<char> bytes(static_cast<size_t>(index_bytes + text_bytes + kFooterBytes), '\0');
  if (slots > 0) std::memcpy(bytes.data(), index.data(), static_cast<size_t>(index_bytes));
  std::memcpy(bytes.data() + index_bytes, text.data(), text.size());
  char* footer = bytes.data() + index_bytes + text_bytes;
  std::memcpy(footer, kFooterMagic, kFooterMagicBytes);
  put_i64(footer + 16, index_offset);
  put_i64(footer + 24, index_bytes);
  put_i64(footer + 32, index_offset + index_bytes);
  put_i64(footer + 40, text_bytes);
  put_i64(footer + 48, index_offset + static_cast<std::int64_t>(bytes.size()));
  return bytes;
}

bool has_posix_magic(const void* first_bytes, std::size_t n) {
  return n >= kMagicBytes && std::memcmp(first_bytes, kMagic, kMagicBytes) == 0;
}

PosixFormatReader::PosixFormatReader(std::unique_ptr<ByteRanges> source, std::string name,
                                     std::string backend_name)
    : source_(std::move(source)), name_(std::move(name)), backend_name_(std::move(backend_name)) {
  load();
}

void PosixFormatReader::refuse(const std::string& why) const {
  throw UsageError(name_, why);
}

// The header and footer, checked against each other and the size, then the
// index and the JSON they locate.
void PosixFormatReader::load() {
  const std::int64_t size = source_->size();
  const std::string incomplete =
      "is not a complete posix output (no valid footer: its writer did not finish it)";
  std::array<char, kHeaderBytes> head{};
  std::array<char, kFooterBytes> footer{};
  if (size < kHeaderBytes + kFooterBytes || !source_->read(head.data(), kHeaderBytes, 0) ||
      !source_->read(footer.data(), kFooterBytes, size - kFooterBytes))
    refuse(incomplete);
  if (!has_posix_magic(head.data(), head.size()))
    refuse("not a posix output of iotest (no IOTEST-POSIX-1 header)");
  if (std::memcmp(footer.data(), kFooterMagic, kFooterMagicBytes) != 0) refuse(incomplete);
  chunk_bytes_ = get_i64(head.data() + 24);
  slot_bytes_ = get_i64(head.data() + 32);
  const std::int64_t index_offset = get_i64(footer.data() + 16),
                     index_bytes = get_i64(footer.data() + 24),
                     json_offset = get_i64(footer.data() + 32),
                     json_bytes = get_i64(footer.data() + 40);
  const std::int64_t slots = index_bytes / static_cast<std::int64_t>(sizeof(std::int64_t));
  if (get_i64(head.data() + 16) != kHeaderBytes || chunk_bytes_ <= 0 || slot_bytes_ <= 0 ||
      slot_bytes_ % kBlock != 0 || slot_bytes_ < chunk_bytes_ || index_bytes < 0 ||
      index_bytes % 8 != 0 || index_offset != slot_offset(slots, slot_bytes_) ||
      json_offset != index_offset + index_bytes || json_bytes < 0 ||
      json_offset + json_bytes + kFooterBytes != size || get_i64(footer.data() + 48) != size)
    refuse(incomplete + ": its header and footer disagree with its size");

  std::vector<std::int64_t> ids(static_cast<size_t>(slots));
  std::string text(static_cast<size_t>(json_bytes), '\0');
  if (!source_->read(ids.data(), index_bytes, index_offset) ||
      !source_->read(text.data(), json_bytes, json_offset))
    refuse(incomplete);
  load_json(text, slots);
  rebuild_observation();
  load_index(ids);
}

void PosixFormatReader::load_json(const std::string& text, std::int64_t slots) {
  try {
    const json doc = json::parse(text);
    const auto& l = doc.at("layout");
    nbls_ = l.at("baselines").get<index_t>();
    ntimes_ = l.at("times").get<index_t>();
    nfreqs_ = l.at("channels").get<index_t>();
    chunk_rows_ = l.at("time_chunk").get<index_t>();
    chunk_channels_ = l.at("freq_chunk").get<index_t>();
    freq_ = doc.at("frequencies_hz").get<std::vector<double>>();
    if (nbls_ < 1 || ntimes_ < 1 || nfreqs_ < 1 || chunk_rows_ < 1 || chunk_channels_ < 1 ||
        static_cast<index_t>(freq_.size()) != nfreqs_ ||
        doc.at("slots").get<std::int64_t>() != slots ||
        doc.at("chunk_bytes").get<std::int64_t>() != chunk_bytes_ ||
        doc.at("slot_bytes").get<std::int64_t>() != slot_bytes_ ||
        chunk_rows_ * chunk_channels_ * kCplxBytes != chunk_bytes_)
      refuse("its index does not match its header (not written by this iotest?)");
    if (!doc.at("provenance").is_null()) provenance_ = provenance_from(doc.at("provenance"));
    for (const auto& p : doc.at("written_parts"))
      parts_.push_back({p.at(0).get<std::int64_t>(), p.at(1).get<std::int64_t>(),
                        p.at(2).get<std::int64_t>(), p.at(3).get<std::int64_t>()});
    observation_ = observation_options_from(doc.at("observation"));
    for (const auto& c : doc.value("chunk_crc32", json::array()))
      checksums_.push_back({c.at(0).get<std::int64_t>(), c.at(1).get<std::uint32_t>()});
    parts_in_slots_ = doc.value("parts_in_slots", false);
  } catch (const json::exception& e) {
    refuse(std::string("its index is not iotest's posix JSON: ") + e.what());
  }
}

void PosixFormatReader::rebuild_observation() {
  try {
    obs_ = telescope::make_observation(observation_);
  } catch (const UsageError& e) {
    refuse("its observation cannot be rebuilt: " + e.one_line());
  } catch (const std::runtime_error& e) {  // a layout file of one's own, now unreadable
    refuse(std::string("its observation cannot be rebuilt: ") + e.what());
  }
  if (obs_.baseline_count() != nbls_ || obs_.time.steps != ntimes_ || obs_.freq.steps != nfreqs_)
    refuse("its observation, rebuilt, has another shape than its data");
  baselines_ = obs_.baselines();
}

// Chunk id -> slot, sorted by id (then slot): 16 B per slot, looked up by
// bisection (one output of many holds few of the observation's chunks).
void PosixFormatReader::load_index(const std::vector<std::int64_t>& ids) {
  slots_.reserve(ids.size());
  for (std::size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] < 0 || ids[k] >= chunks_expected())
      refuse("its index lists a chunk outside the observation");
    slots_.emplace_back(ids[k], static_cast<std::int64_t>(k));
  }
  std::sort(slots_.begin(), slots_.end());
  const auto same_chunk = [](const SlotEntry& a, const SlotEntry& b) { return a.first == b.first; };
  if (!parts_in_slots_ &&
      std::adjacent_find(slots_.begin(), slots_.end(), same_chunk) != slots_.end())
    refuse("its index lists a chunk twice");
  chunks_present_ = 0;
  for (std::size_t k = 0; k < slots_.size(); ++k)
    if (k == 0 || !same_chunk(slots_[k - 1], slots_[k])) ++chunks_present_;
}

std::span<const PosixFormatReader::SlotEntry> PosixFormatReader::slots_of(std::int64_t id) const {
  const auto by_id = [](const SlotEntry& a, const SlotEntry& b) { return a.first < b.first; };
  const auto [first, last] =
      std::equal_range(slots_.begin(), slots_.end(), SlotEntry(id, 0), by_id);
  return {first, last};
}

// From the rebuilt observation, as the hdf5 back-end computes its
// uvw_array: antenna a2 minus antenna a1 at the row's time step. O(antennas)
// per call, no state, so calls from several threads are safe.
std::array<double, 3> PosixFormatReader::uvw(index_t row) const {
  const index_t b = row / ntimes_, t = row % ntimes_;
  const auto [a1, a2] = baselines_.at(static_cast<size_t>(b));
  const auto at = obs_.antenna_uvw(t);
  const auto& p1 = at[static_cast<size_t>(a1)];
  const auto& p2 = at[static_cast<size_t>(a2)];
  return {p2.u - p1.u, p2.v - p1.v, p2.w - p1.w};
}

std::vector<bool> PosixFormatReader::chunk_map() const {
  std::vector<bool> map(static_cast<size_t>(chunks_expected()), false);
  for (const auto& [id, slot] : slots_) map[static_cast<size_t>(id)] = true;
  return map;
}

bool PosixFormatReader::chunk_present(index_t row, index_t channel) const {
  return !slots_of(chunk_id(row / chunk_rows_, channel / chunk_channels_)).empty();
}

// An absent chunk reads as zero (as the hdf5 reader's fill value): verify's
// chunk checks report it.
cplx PosixFormatReader::visibility(index_t row, index_t channel) const {
  const index_t within = row % chunk_rows_ * chunk_channels_ + channel % chunk_channels_;
  cplx v{};
  for (const auto& [id, slot] : slots_of(chunk_id(row / chunk_rows_, channel / chunk_channels_))) {
    cplx part;
    if (!source_->read(&part, kCplxBytes, slot_offset(slot, slot_bytes_) + within * kCplxBytes))
      throw std::runtime_error(name_ + ": reading a visibility failed (the file is short)");
    xor_into(&v, &part, kCplxBytes);
  }
  return v;
}

bool PosixFormatReader::read_chunk(const ChunkKey& key, cplx* out) const {
  const auto slots = slots_of(chunk_id(key.row_chunk, key.freq_chunk));
  if (slots.empty()) return false;
  read_slot(slots.front().second, out);
  if (slots.size() > 1) {  // parts_in_slots
    std::vector<cplx> part(static_cast<size_t>(chunk_bytes_ / kCplxBytes));
    for (const auto& [id, slot] : slots.subspan(1)) {
      read_slot(slot, part.data());
      xor_into(out, part.data(), chunk_bytes_);
    }
  }
  zero_past_edges(key, out);  // the writer's values there are ignored
  return true;
}

void PosixFormatReader::read_slot(std::int64_t slot, cplx* out) const {
  if (!source_->read(out, chunk_bytes_, slot_offset(slot, slot_bytes_)))
    throw std::runtime_error(name_ + ": reading a chunk failed (the file is short)");
}

// Slot order: the order the writer wrote them, sequential in storage; a
// chunk in parts where its first part is.
std::vector<ChunkKey> PosixFormatReader::stored_chunks() const {
  std::vector<SlotEntry> by_slot;  // (first slot, chunk id)
  by_slot.reserve(slots_.size());
  for (std::size_t k = 0; k < slots_.size(); ++k)
    if (k == 0 || slots_[k - 1].first != slots_[k].first)
      by_slot.emplace_back(slots_[k].second, slots_[k].first);
  std::sort(by_slot.begin(), by_slot.end());
  std::vector<ChunkKey> keys;
  keys.reserve(by_slot.size());
  for (const auto& [slot, id] : by_slot)
    keys.push_back({id / channel_chunks(), id % channel_chunks()});
  return keys;
}

}  // namespace iotest::storage::posix_format
