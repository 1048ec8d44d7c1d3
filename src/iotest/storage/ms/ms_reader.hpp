// The ms back-end's read half: MeasurementSets as iotest writes them
// (ms_backend.cpp), through casacore. docs/storage.md, "MeasurementSets",
// says how an iotest chunk maps onto the table's rows and tiles.
#pragma once

#include <array>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "iotest/storage/ms/ms_table.hpp"
#include "iotest/storage/reader.hpp"
#include "iotest/telescope/observation.hpp"

namespace iotest::storage::ms {

// What iotest keeps in a MeasurementSet besides the MS's own columns and
// subtables, as the field's tools leave alone: keywords of the main table
// and two subtables of its own (a table keyword names each, as the MS
// names ANTENNA or FIELD).
inline constexpr const char* kLayoutKeyword = "IOTEST_LAYOUT";  // JSON: axes, chunks, provenance
inline constexpr const char* kChunksTable = "IOTEST_CHUNKS";    // CHUNK, CRC32: in write order
inline constexpr const char* kPartsTable = "IOTEST_WRITTEN_PARTS";
// ROW_CHUNK, FIRST_ROW: where each row chunk's rows are in the main table.
inline constexpr const char* kRowChunksTable = "IOTEST_ROW_CHUNKS";
// IOTEST_LAYOUT's "checksum_of" (kChecksumOfStoredCells): IOTEST_CHUNKS'
// CRC-32s are of a chunk's cells as DATA stores them (channels fastest).
// Files without it (the first ms writer) took them of iotest's values in
// double precision, as the other back-ends do.
// The MS's visibilities are the conjugates of iotest's, against uvw of
// the opposite sign (antenna 1 minus antenna 2), as pyuvdata writes
// MeasurementSets: CASA's and WSClean's convention, which place the sky
// where iotest's l and m do (docs/imaging.md, "Conventions").

class MsReader final : public Reader {
 public:
  // Throws UsageError naming the folder when it is not a MeasurementSet
  // written by iotest (a foreign MS, a missing column or subtable, a
  // truncated table). Nothing proportional to the observation is read up
  // front but the list of chunks.
  explicit MsReader(const std::string& path);
  ~MsReader() override;
  MsReader(const MsReader&) = delete;
  MsReader& operator=(const MsReader&) = delete;

  std::string_view backend() const override { return "ms"; }
  cplx as_stored(cplx v) const override { return {to_single(v.real()), to_single(v.imag())}; }
  std::array<double, 3> uvw(index_t row) const override;
  std::vector<WrittenPart> written_parts() const override;
  std::vector<ChunkChecksum> checksums() const override;
  index_t chunks_present() const override { return static_cast<index_t>(order_.size()); }
  std::vector<bool> chunk_map() const override { return present_; }
  bool chunk_present(index_t row, index_t channel) const override;
  cplx visibility(index_t row, index_t channel) const override;
  bool read_chunk(const ChunkKey& key, cplx* out) const override;
  std::uint32_t chunk_checksum(const ChunkKey& key, const cplx* chunk) const override;
  std::vector<ChunkKey> stored_chunks() const override;

  // Whether `path` is a casacore table (a folder with table.dat).
  static bool recognises(const std::string& path);

 private:
  // The main table's row of an observation row here (-1: not in this file).
  index_t table_row(index_t row) const;
  void read_channel_range(const nlohmann::json& doc, std::vector<double> own_hz);
  bool holds_channel(index_t channel) const {
    return channel >= first_channel_ && channel < first_channel_ + file_channels_;
  }
  // A chunk's cells in the main table, clipped at the observation's edges.
  Box box_of(const ChunkKey& key) const;

  std::unique_ptr<TableReader> table_;
  std::vector<index_t> first_row_;  // per row chunk: its first row here, -1: none
  // The observation, rebuilt from the provenance when (u, v, w) of a row
  // not in this file is asked (verify samples any row from one file).
  mutable std::optional<telescope::Observation> observation_;
  mutable std::vector<std::pair<int, int>> baselines_;  // its antenna pairs, made once
  // read_chunk's single-precision cube, kept: a reader serves one thread
  // at a time, and the imaging direction reads every chunk through it.
  mutable std::vector<std::complex<float>> cube_;
  std::string path_;
  std::vector<bool> present_;   // per chunk
  bool checksum_of_stored_ = false;  // kChecksumOfStoredCells (else of iotest's values)
  // The observation's channels this file holds (all, but in a set split by
  // frequency): DATA's channel c is the observation's first_channel_ + c.
  index_t first_channel_ = 0, file_channels_ = 0;
  std::vector<index_t> order_;  // chunks present, in write order
  std::vector<ChunkChecksum> checksums_;
  std::vector<WrittenPart> parts_;
};

}  // namespace iotest::storage::ms
