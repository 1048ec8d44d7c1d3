// The one report data model. Every figure iotest prints comes from a Report:
// serialised once to JSON (to_json), rendered once for humans (render_text)
// and tabulated once for spreadsheets (csv_tables). Sections a mode does not
// produce stay empty and are omitted. Each section's serialiser, renderer and
// tables sit together in src/iotest/report/sections_*.cpp, and one ordered
// list of sections drives all three (sections.hpp says how to add one).
#pragma once

#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "iotest/common/array.hpp"
#include "iotest/common/file_layout.hpp"
#include "iotest/common/store_description.hpp"
#include "iotest/config/rec_set.hpp"

namespace iotest::report {

// The version of the report's JSON layout, described by
// docs/report.schema.json: raised when a field changes meaning or goes.
inline constexpr int kSchemaVersion = 1;

// The definition written into every report that carries accuracy figures.
inline constexpr const char* kAccuracyDefinition =
    "relative RMSE: RMS(computed - reference) / RMS(reference) over the same samples; "
    "*_max is the worst such figure over the checked subgrids or facets";

struct RunSettings {  // what the user chose besides the recombination set
  index_t source_count = 0;
  std::uint64_t seed = 0;
  std::string direction;
  index_t subgrids = 0;  // processed per direction
  index_t check = 0;     // subgrids checked against the direct transform
  int threads = 0;
  // degrid only
  int support = 0, w_support = 0;
  bool w_free = false;             // every w is 0: towers of one plane, no w kernel
  double w_step = 0;               // wavelengths between w-planes
  double w_stack_step = 0;         // wavelengths between w-stacking planes (0: one stack)
  index_t w_stacks = 0;            // w-stacking planes with visibilities
  double tower_half_height = 0;    // wavelengths of w a tower covers either side of its stack
  double target_err = 0;           // with --target-err: the target the height was measured for
  double tower_error_at_zero = 0;  // and the calibration's error at w = 0
  index_t vis_samples = 0;         // visibilities checked against the direct transform
  std::string backend;             // storage back-end
  std::string durability;          // what the write time covers: "fsync at close", "O_DIRECT, ..."
  index_t value_bytes = 16;        // bytes stored per visibility (ms: 8, single precision)
  std::uint32_t nonce = 0;         // the run's, recorded in its files (0: none)
  std::string output;              // output path, empty for a dry run
  // Files under the outputs' final names when the run began, which it
  // replaced (docs/storage.md, "Outputs that belong to their run").
  index_t outputs_replaced = 0;
  // The store the outputs went to, where it is not a file system (an
  // object store: its endpoint, software and bucket).
  std::optional<StoreDescription> store;
  // --file-layout: the layout asked for the outputs (the fields given),
  // and whether it was set on every one (else the first reason a rank
  // found, as the run's one warning said).
  std::optional<FileLayout> file_layout;
  bool file_layout_applied = false;
  std::string file_layout_not_applied_why;
};

struct Counts {
  index_t facets = 0;
  std::optional<index_t> baselines;             // with a visibility set
  std::optional<index_t> visibilities;          // with a visibility set
  std::optional<index_t> subgrids_used;         // subgrids holding visibilities
  std::optional<index_t> bytes_written;         // chunk bytes written to storage, rewrites included
  std::optional<index_t> chunks_written;        // distinct storage chunks written
  std::optional<index_t> visibilities_written;  // carried by the chunk writes
  std::optional<index_t> chunks_rewritten;      // writes to a chunk already written (accumulated)
  std::optional<index_t> bytes_sent;            // contributions sent by producers (run)
  std::optional<index_t> bytes_received;        // contributions received by streamers (run)
  index_t subgrids = 0;                         // of the whole grid
  index_t subgrids_processed = 0;
  index_t subgrid_columns = 0;
  index_t subgrids_checked = 0;
  index_t facets_checked = 0;  // facets with sources (a zero facet has no relative error)
};

struct Accuracy {  // NaN when not measured (serialised as null)
  double subgrid_rmse = std::nan("");
  double subgrid_rmse_max = std::nan("");
  double facet_rmse = std::nan("");
  double facet_rmse_max = std::nan("");
  double vis_rmse = std::nan("");
  double vis_rmse_max = std::nan("");  // worst subgrid's figure over its samples
  std::optional<index_t> vis_samples;
  // The imaging direction: dirty image pixels checked against the direct
  // adjoint transform of the same visibilities (their RMSE: facet_rmse).
  std::optional<index_t> pixel_samples;
  // --direction=both: RMS(residual) / RMS(observed) over every visibility,
  // zero to rounding when the model is the sky that made the files.
  double residual_rms = std::nan("");
};

// Where the time goes (issue 13): thread-seconds in each stage of the
// predict walk. A producer's facet preparation (at each w-stack), column
// transforms and contributions; a streamer's subgrid assembly
// (contributions summed), its visits' track pieces, w-towers, and degrid
// tasks (tap weights, tap sums and chunk assembly). Writes are the
// writers' write_s and sync_s.
struct StageSeconds {
  double facet_s = 0, column_s = 0, contribution_s = 0;
  double assembly_s = 0, pieces_s = 0, tower_s = 0, degrid_task_s = 0;
  StageSeconds& operator+=(const StageSeconds& o) {
    facet_s += o.facet_s;
    column_s += o.column_s;
    contribution_s += o.contribution_s;
    assembly_s += o.assembly_s;
    pieces_s += o.pieces_s;
    tower_s += o.tower_s;
    degrid_task_s += o.degrid_task_s;
    return *this;
  }
};

struct RankFigures {
  double busy_s = 0, wait_s = 0, idle_s = 0;
  double cpu_s = 0;  // CPU time of the process (all its threads): busy_s is wall time, which
                     // on an oversubscribed host includes waiting for a core
  index_t messages_sent = 0, messages_received = 0;
  index_t bytes_sent = 0, bytes_received = 0;
  index_t contributions = 0;  // producer: facet contributions computed
  index_t subgrids = 0;       // streamer: subgrids assembled
  index_t visibilities = 0;   // streamer: visibilities degridded
  index_t w_planes = 0;
  index_t bytes_written = 0, chunks_written = 0, chunks_rewritten = 0;
  double write_s = 0;  // in the back-end's writes, over this streamer's writers
  double sync_s = 0;   // in its syncs and closing, over this streamer's writers
  double open_s = 0;   // opening its outputs with their headers, before the start
  // Queue high-water marks: sends in flight, subgrids held, degrid tasks
  // outstanding, chunks waiting for writers.
  index_t send_queue_max = 0, subgrid_queue_max = 0, task_queue_max = 0, visibility_queue_max = 0;
  index_t peak_rss_bytes = 0;
  StageSeconds stages;
};

struct Timing {
  double wall_s = 0;      // the whole command
  double planning_s = 0;  // FFTW plans and window tables
  double predict_s = 0;   // timed predict recombination (checks excluded)
  double image_s = 0;     // timed image recombination (input generation and checks excluded)
  double input_s = 0;     // grid: predicting its visibilities in memory (apart from image_s)
  double check_s = 0;     // direct transforms and comparisons
  double degrid_s = 0;    // the whole predict chain of `iotest degrid` (checks excluded)
  double write_s = 0;     // in the storage back-end's writes (part of degrid_s)
  double sync_s = 0;      // in its syncs and closing (fsync, MPI_File_sync)
  double open_s = 0;      // run: opening the outputs with their headers, before the start
  double stream_s = 0;    // run: the distributed walk, from the start barrier to the last write
  std::optional<StageSeconds> stages;  // run: summed over the ranks
};

struct Rates {
  double predict_subgrids_per_s = 0;
  double image_subgrids_per_s = 0;
  double predict_gflops = 0;
  double image_gflops = 0;
  double gflops = 0;     // both directions: FFT work (5 n log2 n) over timed seconds
  double vis_per_s = 0;  // degrid: visibilities over the whole chain's seconds
  double vis_per_s_per_thread = 0;
  double w_planes_per_s = 0;
  double write_bytes_per_s = 0;      // bytes written over the back-end's seconds, syncs included
  double raw_write_bytes_per_s = 0;  // bytes written over the seconds inside writes
  double net_bytes_per_s = 0;        // run: contribution bytes sent over stream_s
  double subgrids_per_s = 0;         // run: subgrids assembled over stream_s
};

// `iotest run`: what one rank did. Busy: computing; wait: blocked on a full
// queue (back-pressure) or on a peer; idle: nothing to do. Plain numbers
// (trivially copyable), so ranks send them to rank 0 as they are.
struct RankStats : RankFigures {
  // Streamer: its degridding threads' seconds on a full chunk queue, inside
  // their degrid tasks (thread-seconds; stages.degrid_task_s includes them).
  double queue_wait_s = 0;
  int rank = 0;
  std::string role;  // producer, streamer, assigner
  std::string host;
};

// The contributions' traffic between hosts (issue 37, item 4): what a rank
// sent to and received from the ranks of one peer host, and the seconds
// those messages spent in flight, each from its MPI_Isend to the MPI_Test
// that saw it complete, measured by the sender (a receive's in-flight
// seconds are its sender's). The predict direction's producers to
// streamers, --network-only included; not the imaging direction's sends
// nor the grants or the in-transit chunks.
struct PeerTraffic {
  int rank = 0;
  std::string peer_host;
  index_t messages_sent = 0, messages_received = 0;
  index_t bytes_sent = 0, bytes_received = 0;
  double sent_in_flight_s = 0, received_in_flight_s = 0;
};

// One host's link: the contributions that crossed it (between its ranks
// and another host's) and their in-flight seconds, summed over the
// messages (concurrent ones each count), and bytes per such second.
struct HostLink {
  std::string host;
  index_t bytes_out = 0, bytes_in = 0, messages = 0;
  double in_flight_s = 0;
  double bytes_per_s = 0;  // (bytes_out + bytes_in) / in_flight_s; 0 with none
  // The same over the messages between the other hosts (0: none, as with
  // two hosts or one): the rate this link is judged against.
  double others_bytes_per_s = 0;
};

struct Pipeline {
  int ranks = 0, producers = 0, streamers = 0;
  bool assigner = false;
  int threads = 0, producer_threads = 0;
  int writers_per_streamer = 0;
  int writer_ranks = 0;  // in transit: the writer group (writers_per_streamer: per writer rank)
  bool fork_writer = false;
  // --synthetic-vis: storage only. The streamers walk their parts as ever
  // but write a pattern instead of degridding; no producers, no sky.
  bool synthetic_vis = false;
  // Which order it writes the chunks in: "walk" (the real run's completion
  // order) or "sequential" (file order, the storage ceiling); empty without.
  std::string synthetic_order;
  // --network-only: the contributions sent as they are, nothing computed.
  bool network_only = false;
  index_t send_queue = 0, subgrid_queue = 0, task_queue = 0, bls_per_task = 0, visibility_queue = 0;
  index_t subgrid_visits = 0;  // (w-stack, subgrid) pairs walked, busy ones split in parts
  index_t subgrid_parts = 0;   // work items handed to streamers
  std::vector<RankStats> per_rank;
  int slowest_rank = -1;  // the rank busy longest
  std::string bound;      // what bound the run: network, degridding, gridding, storage,
                          // producers, subgrid assembly (synthetic: storage or chunk assembly)
  std::vector<PeerTraffic> peers;  // per rank and peer host, ranks in order, hosts by name
  std::vector<HostLink> links;     // per host that sent or received across hosts, by name
  // The link clearly the slowest (bound_link_rule), "" for none: with
  // bound "network", the link that bounds the run.
  std::string slow_link;
};

// The rule naming a slow link: its bytes per in-flight second below this
// fraction of the rate of the messages between the other hosts, and so
// are those of its messages with each other host alone (so with two hosts
// or one, none is named: nothing to compare it with). A quarter, not a
// half: on the virtual cluster free links ranged 0.53-2.07 of the others'
// rate, and one at 0.38 was once named (docs/pipeline.md has the table).
inline constexpr double kSlowLinkFraction = 0.25;

struct Memory {
  index_t image_bytes = 0;                // N^2 complex doubles: the whole image
  index_t facet_bytes = 0;                // one facet, yB^2
  index_t prepared_facet_bytes = 0;       // one facet after preparation, yN x yB
  index_t contribution_bytes = 0;         // one facet-subgrid message, m^2
  index_t subgrid_bytes = 0;              // one padded subgrid, xM^2
  index_t producer_bytes = 0;             // estimate per facet worker holding one facet
  index_t streamer_bytes = 0;             // estimate per subgrid worker
  index_t single_process_bytes = 0;       // estimate for one process doing it all
  index_t assigner_bytes = 0;             // estimate for the assigner (run)
  index_t writer_bytes = 0;               // estimate per writer rank (run --writer-ranks)
  std::optional<index_t> peak_rss_bytes;  // measured: the largest of any rank
  // --device=cuda: what one streamer holds on its GPU (device::gpu_memory_items:
  // the items of role "streamer GPU"); 0 on the CPU.
  index_t streamer_gpu_bytes = 0;
  // The model behind the estimates: every buffer each role holds.
  struct Item {
    std::string role, name;
    index_t bytes = 0;
  };
  std::vector<Item> items;
};

// The visibility side of a job (with --vis-set).
struct Observation {
  std::string vis_set;
  std::string description;
  index_t antennas = 0;
  bool autocorrelations = false;
  // The imaging direction: whether they went into the dirty image
  // (--image-autocorrelations; imagers leave them out). None: predict.
  std::optional<bool> autocorrelations_imaged;
  // The rows that went into the dirty image: every visibility, less the
  // autocorrelations left out. None: predict.
  std::optional<index_t> visibilities_imaged;
  std::string time;  // START:END/STEPS/CHUNK, hour angle seconds
  std::string freq;  // START:END/STEPS/CHUNK, Hz
  index_t time_chunks = 0, freq_chunks = 0;
  double dec_deg = 0;
  index_t visibility_bytes = 0;  // to be written: one complex double each
  double max_uv = 0, pixel_lm = 0, cell_uv = 0, field_lm = 0;  // grid geometry
  index_t vis_per_subgrid_min = 0, vis_per_subgrid_max = 0;
  double vis_per_subgrid_mean = 0;
};

// `iotest layout`: a telescope layout and sample (u, v, w) tracks.
struct LayoutDump {
  std::string vis_set;
  double lon_deg = 0, lat_deg = 0, height_m = 0;  // array centre
  double max_baseline_m = 0;
  std::vector<std::array<double, 3>> antennas_enu;  // metres
  struct UvwSample {
    index_t baseline = 0, antenna1 = 0, antenna2 = 0, time = 0;
    double hour_angle_s = 0, u = 0, v = 0, w = 0;  // metres
  };
  std::vector<UvwSample> uvw;
};

// The point-source sky of a run, so another tool can predict the same
// visibilities (degrid; omitted above 10,000 sources).
struct Sky {
  double pixel_lm = 0;                          // image pixel in direction cosines
  std::vector<std::array<index_t, 2>> sources;  // pixel positions (axis 0 ~ l, axis 1 ~ m), centred
};

// `iotest verify`: what was re-read and whether it held.
struct Verification {
  std::vector<std::string> files;
  index_t chunks_expected = 0, chunks_present = 0;
  double tolerance = 0;
  bool synthetic = false;  // a --synthetic-vis set: checked against the pattern, exactly
  // A stonewalled set (--duration): only its written parts are checked;
  // the chunks expected are those the parts' visibilities fall in.
  bool stonewalled = false;
  index_t written_parts = 0, visibilities_written = 0;
  std::uint32_t nonce = 0;  // the run the files come from
  // That run as its files record it (empty for files from before): its
  // command line, its start (UTC) and the hosts that wrote the files.
  std::string command_line, started;
  std::vector<std::string> hosts;
  // --all: every value read and checked (synthetic sets).
  bool all = false;
  index_t values_checked = 0, values_wrong = 0;
  index_t chunks_checksummed = 0, checksums_wrong = 0;  // against the writers' CRC-32s
  bool passed = false;
  std::string reason;  // why not, in one line
};

// `iotest run --duration`: stonewalling. After duration_s no new work
// started; the fraction done projects the whole observation's time.
// `iotest read`: an output read back as the imaging direction will, each
// rank its share of the files, each file's chunks in the order they lie.
struct Reading {
  std::vector<std::string> files;
  std::string backend;
  int ranks = 0;
  bool direct = false;          // O_DIRECT (--posix.direct): past the page cache
  bool caches_dropped = false;  // --drop-caches before reading
  index_t chunks = 0, bytes = 0;
  // The imaging direction: chunks the files hold, and the reads beyond
  // one each (a chunk spans several subgrids; each visit reads it again).
  index_t chunks_stored = 0, chunks_reread = 0;
  double open_s = 0;       // opening the files, summed over ranks (apart from reads)
  double read_s = 0;       // inside the read calls, summed over ranks
  double wall_s = 0;       // the reading phase, barrier to barrier
  double bytes_per_s = 0;  // bytes over wall_s
  // --check: every value read against the synthetic pattern. A chunk split
  // over writers is in each of their files, zero where another holds the
  // value: each non-zero value must be the pattern's, and across the files
  // every visibility of the observation must be there exactly once
  // (values_right == values_expected; -1: unknown, a stonewalled set).
  bool checked = false;
  index_t values_checked = 0, values_wrong = 0, values_right = 0, values_expected = -1;
  std::string first_wrong;
  bool passed = true;
  struct Rank {
    int rank = 0;
    std::string host;
    index_t files = 0, chunks = 0, bytes = 0;
    double open_s = 0, read_s = 0;
  };
  std::vector<Rank> per_rank;
};

// `iotest h5`: the checkpoint kernel (parallel HDF5 on its own).
struct Checkpoint {
  std::string path;
  int ranks = 0, steps = 0;
  std::array<int, 3> grid{};
  std::array<long long, 3> domain{}, chunk{};  // per rank; per HDF5 chunk (one step)
  std::string transfer;                        // collective or independent
  bool collective_metadata = false, never_fill = false, precreate = false;
  std::string alloc;  // early, late, incremental
  long long alignment = 0, chunk_cache = 0;
  std::vector<std::string> hints;  // MPI-IO hints passed through
  index_t bytes_per_step = 0, bytes = 0;
  // The slowest rank's seconds, barrier to barrier: creating (or opening a
  // precreated) file and dataset, each step's write, flushing to the
  // device (MPI_File_sync) and closing.
  double create_s = 0, write_s = 0, close_s = 0;
  std::vector<double> step_s;
  double raw_bytes_per_s = 0;        // bytes over write_s
  double aggregate_bytes_per_s = 0;  // bytes over create + write + close
  // What HDF5 did rather than what was asked: the raw data's actual I/O
  // mode of the last step (H5Pget_mpio_actual_io_mode), why not collective
  // if so, and the open file's metadata settings.
  std::string io_mode, no_collective_cause;
  bool metadata_reads_collective = false, metadata_writes_collective = false;
  // --check: every value read back.
  bool checked = false;
  index_t values_wrong = 0;
};

// The dirty image as a file (grid --image, run --direction=image|both
// --image): where, how large, and how long it took to write.
struct ImageFile {
  std::string path;
  std::string format;     // "fits" or "hdf5"
  index_t used_size = 0;  // pixels on each axis
  index_t bytes = 0;      // the file's
  // Inside the file library's calls (creating, writing, closing, syncing),
  // and the writing as a whole (run: the facets' blocks received by the
  // writer, rank 0, after the walk).
  double write_s = 0, wall_s = 0;
  int writer_rank = 0;
};

struct Stonewall {
  double duration_s = 0;
  bool ended_early = false;                     // the deadline came before the walk's end
  index_t visits_total = 0, visits_walked = 0;  // visits whose contributions were sent
  index_t parts_total = 0, parts_done = 0;      // parts whose every degrid task ran
  index_t visibilities_total = 0, visibilities_done = 0;
  double fraction = 0;     // of the visibilities
  double projected_s = 0;  // the whole observation on these ranks at this run's rate
};

// Where the visibilities were written (issue 12, the Nyx paper's question):
// in situ by writers inside each streamer, or in transit by a writer group
// of --writer-ranks ranks the streamers send their chunks to. Both sides'
// waits say which one bound the run, and the measured rates give the
// writer ranks that would keep pace: K = ceil(S x compute / (writers per
// rank x write)), the Nyx rule n x t_compute ~ t_write.
// A run's time line (--timeline): per rank and interval, its main
// thread's busy and wait seconds (idle: the rest) and what its stage moved.
struct Timeline {
  double interval_s = 0;
  struct Rank {
    int rank = 0;
    std::string role, host;
    std::vector<double> busy_s, wait_s;
    std::vector<index_t> visibilities, bytes_sent, bytes_written;
  };
  std::vector<Rank> ranks;
};

struct Transit {
  std::string placement;  // "in situ" or "in transit"
  // How the outputs divide the observation (storage::FileSplit): "row
  // chunk", or "frequency" (ms: every row of a range of channels each; in
  // situ the streamers exchange chunks, counted in chunks_sent).
  std::string files_split_by = "row chunk";
  int writer_ranks = 0, writers_per_rank = 0;
  index_t transit_queue = 0;  // messages in flight per streamer, receives posted per writer rank
  index_t chunks_sent = 0, bytes_sent = 0;  // to the writer group (or exchanged)
  index_t chunks_kept = 0;                  // the exchange: for a streamer's own files, not sent
  double bytes_per_s = 0;                   // sent over the run's stream time
  // The longest of any rank's: degridding threads on a full chunk queue,
  // forwarders with every slot in flight, writer ranks with no message in,
  // writer ranks on their writers' full queues.
  double streamer_queue_wait_s = 0, send_wait_s = 0, writer_idle_s = 0, writer_queue_wait_s = 0;
  std::string bound;  // "streamers", "writers" or (in transit) "transfer"
  // Per streamer: chunk bytes made per second it was not held by writing;
  // per writer: bytes per second inside writes and syncs.
  double compute_bytes_per_s = 0, write_bytes_per_s = 0;
  index_t suggested_writer_ranks = 0;
};

// `iotest plan`: the job laid out on its nodes. Ranks are dealt over the
// nodes (pipeline::place_by_node: rank r on node r mod nodes, as mpirun
// --map-by node); roles in rank order: producers, streamers, the assigner.
struct Advice {
  index_t nodes = 1;
  index_t ranks_per_node = 0;
  index_t recommended_ranks = 0;  // nodes x ranks_per_node: every slot used
  index_t producers = 0, streamers = 0;
  index_t writer_ranks = 0;  // in transit (--writer-ranks), after the streamers
  bool assigner = false;
  int threads = 0, producer_threads = 0;
  std::string rule;
  // The run's direction (swiftly::to_string) and, imaging, whether it
  // would read a predict run's files (else it predicts them in memory).
  std::string direction = "predict";
  bool reads_files = false;
  // --rates-from: the writer ranks that would keep pace with these
  // streamers at a measured run's rates (report::Transit's rule).
  std::optional<index_t> suggested_writer_ranks;
  std::string rates_from;          // the report they came from
  // --slurm without --time-limit, from the prediction: the job's limit,
  // whose stream budget gives the run margin x the predicted stream time.
  std::string time_limit_from_prediction;
  double time_limit_margin = 0;
  index_t node_memory_bytes = 0;   // what one node can give the job
  std::string node_memory_source;  // "--node-memory" or where the default came from
  // Consecutive nodes holding the same ranks, with their estimate (the
  // memory model's bytes per role times the ranks of each role on a node).
  struct NodeGroup {
    index_t first_node = 0, node_count = 0;
    index_t producers = 0, streamers = 0, writers = 0, assigners = 0;  // ranks on each node
    index_t bytes = 0;                                                 // per node
    bool fits = true;                                                  // bytes <= node_memory_bytes
    // --device=cuda: the streamers of the busiest GPU (ceil(streamers /
    // gpus_per_node)) and their GPU memory.
    index_t streamers_per_gpu = 0, gpu_bytes = 0;
    std::string nodes_text() const;  // "node 4", "nodes 5-29"
  };
  std::vector<NodeGroup> layout;
  std::vector<std::string> warnings;  // advice, not errors: plan still exits 0
  std::string job_script;             // --slurm: the batch script for this layout (else empty)
  // --device=cuda: a node's GPUs, which its streamers share round-robin
  // (device::gpu_for_local_rank), and the memory of one; each NodeGroup's
  // gpu_bytes is what its busiest GPU holds. 0 GPUs: the CPU.
  index_t gpus_per_node = 0;
  index_t gpu_memory_bytes = 0;
  std::string gpu_memory_source;  // "--gpu-memory" or the GPU it was probed from
};

// Where and with what the figures were made, in every report (as IOR and
// h5bench record it): a figure without its code, libraries, hosts and file
// system cannot be compared.
struct Environment {
  std::string iotest_version, git_revision;
  std::string
      build_arch;  // the build's architecture flags (IOTEST_ARCH): native, x86-64-v3, generic
  std::string hdf5_version, mpi_version, fftw_version;
  std::string date;  // UTC, ISO 8601, when the report was made
  std::string command_line;
  // Every option of the command, defaults included, as a --config file
  // (TOML): the run repeats with `iotest CMD --config=FILE`.
  std::string configuration;
  std::vector<std::string> hosts;  // distinct, in rank order
  struct FileSystem {
    std::string path;  // the output (or input) it was found for
    std::string mount_point, type, options;
    // The file system in plain words ("ceph" for fuse.ceph-fuse and ceph)
    // and how this host reaches it: "fuse" or "kernel".
    std::string name, client;
    // CephFS only (name "ceph"): the output's layout where it could be
    // read (common/file_layout.hpp), and its pool's replication (copies),
    // or why not ("ceph CLI not found").
    std::optional<FileLayout> layout;
    std::optional<int> replication;
    std::string replication_unknown_why;
  };
  std::optional<FileSystem> output;
};

// `iotest net`: the interconnect between pairs of ranks over message size,
// for each transport (MPI, TCP), as OSU's latency and bw tests measure it.
struct Interconnect {
  int ranks = 0, nodes = 0;
  int window = 0;                       // messages in flight per bandwidth iteration
  double time_per_size_s = 0;           // --time-per-size: the budget of a size's timed tests
  std::vector<std::string> transports;  // "mpi", "tcp": the order of every pair's figures
  struct Size {  // the counts planned: at most these (Figure's, the counts used)
    index_t bytes = 0;
    int iterations = 0, warmup = 0;      // latency round trips, timed and not
    int windows = 0, window_warmup = 0;  // bandwidth windows, timed and not
  };
  std::vector<Size> sizes;
  // One pair, one transport, one size.
  struct Figure {
    double latency_us = 0;          // half the mean round trip
    double bandwidth_mb_per_s = 0;  // MB = 10^6 B (as OSU): bytes streamed over their time
    index_t messages_checked = 0, messages_wrong = 0;  // --check, both ways
    // The counts used (at most the size's, fewer where --time-per-size bound)
    int iterations = 0, warmup = 0;      // latency round trips, timed and not
    int windows = 0, window_warmup = 0;  // bandwidth windows, timed and not
    int window = 0;                      // messages per bandwidth window
  };
  struct Pair {
    int sender = 0, receiver = 0;  // ranks; the bandwidth flows from sender to receiver
    std::string sender_host, receiver_host;
    std::string tcp_address;                   // where the sender reached the receiver
    std::vector<std::vector<Figure>> figures;  // [transport][size]
  };
  std::vector<Pair> pairs;
  bool checked = false;  // --check: every check message's bytes compared on arrival
  index_t messages_checked = 0, messages_wrong = 0;
};

// `iotest scale`: the runs and the Universal Scalability Law fitted to
// every stage (tools/usl.py's figures).
struct Scaling {
  std::string n_by;  // what N counts: streamers, ranks or nodes
  struct Point {
    int n = 0, ranks = 0, streamers = 0;
    std::string report;
    double stream_s = 0, vis_per_s = 0, net_bytes_per_s = 0, write_bytes_per_s = 0;
  };
  std::vector<Point> points;  // by N
  struct Fit {
    std::string stage, unit;
    double gamma = 0, alpha = 0, beta = 0;
    double gamma_ci = 0, alpha_ci = 0, beta_ci = 0;  // 95 % half-widths (NaN: too few runs)
    double peak_n = 0;      // N* = sqrt((1 - alpha) / beta) (infinite: beta = 0)
    double efficiency = 0;  // X(N) / (N gamma) at the largest N, as fitted
    bool sublinear = false, negative = false;
  };
  std::vector<Fit> fits;
  std::vector<std::string> plots;  // PNG files
};

// --repetitions=R (as IOR and fio repeat): the measured part run R times in
// one job, every rate's values with their min, median and max.
struct Repetitions {
  int count = 0;
  struct Figure {
    std::string name;  // "rates.vis_per_s", "timing.stream_s", ...
    std::vector<double> values;
    double min = 0, median = 0, max = 0;
  };
  std::vector<Figure> figures;
};

// Where the streamers degrid and grid (--device): the CPU, or CUDA GPUs
// with the GPUs used and where their time went (filled by the GPU path;
// not measured: NaN, serialised as null). Absent for the CPU path.
struct Device {
  std::string kind = "cpu";  // device::name(Kind): cpu or cuda
  struct Gpu {
    int index = -1;  // CUDA ordinal on its node
    std::string name, driver;
    index_t memory_bytes = 0;
    // Peaks (0: unknown): what the kernels' share of the device is taken of.
    double fp64_flops_per_s = 0, memory_bytes_per_s = 0;
  };
  std::vector<Gpu> gpus;  // the GPUs the streamers used, each once
  // Summed over the streamers: in GPU kernels, in host-device copies, and
  // host threads waiting on the GPU.
  double kernel_s = std::nan(""), transfer_s = std::nan(""), host_wait_s = std::nan("");
  bool cuda() const { return kind == "cuda"; }
};

// A predicted run (`--calibration`, prediction/prediction.hpp): the
// stream time of the pipeline's stages at a one-node run's per-thread
// rates on a cluster's links and storage, what bounds it, and how that
// moves with the node count; in a run's report, beside what it measured.
struct Prediction {
  std::string calibration;       // the report the rates came from
  std::string calibration_host;  // where it ran
  // The rates taken from it, per thread (prediction::calibration_from).
  struct Rates {
    double degrid_s_per_vis = 0;    // degrid tasks' seconds over the visibilities
    double part_s = 0;              // assembly, track pieces and tower, a subgrid part
    double contribution_s = 0;      // facet columns and contributions, a facet's contribution
    double facet_s = 0;             // a facet's preparation, a w-stack
    double writer_bytes_per_s = 0;  // one writer inside writes and syncs (0: none written)
  };
  Rates rates;
  // The cluster: its nodes and their cores, a node's link (each way) and
  // what the storage takes in all (0: not given, not a bound).
  struct Cluster {
    index_t nodes = 1;
    int cores_per_node = 1;
    double link_bytes_per_s = 0, storage_bytes_per_s = 0;
  };
  Cluster cluster;
  struct Stage {
    std::string name;    // producers, network, degridding, storage
    double seconds = 0;  // its busiest rank's, node's or writer's, alone
    double share = 0;    // seconds / stream_s
    std::string where;   // which one: "rank 3", "node 1's link out", ...
  };
  std::vector<Stage> stages;
  double stream_s = 0, vis_per_s = 0;
  std::string bound;  // the stage of the most seconds
  // The chunk bytes the run writes: every chunk whole, once by each
  // streamer holding part of it (prediction::count_chunk_bytes; 0: a dry
  // run).
  index_t bytes_written = 0;
  struct AtNodes {    // the same job laid out on another node count
    index_t nodes = 0, producers = 0, streamers = 0;
    int threads = 0;
    double stream_s = 0;
    std::string bound;
  };
  std::vector<AtNodes> by_nodes;
  index_t bound_moves_at = 0;  // the first count of by_nodes with another bound (0: none)
  // A run's: what it measured, and predicted / measured - 1.
  std::optional<double> measured_stream_s;
  std::string measured_bound;
  std::optional<double> error;
};

struct Report {
  std::string mode;  // the command: recombine, plan, degrid, grid, run, read, verify, ...
  config::RecombinationParams rec;
  std::optional<RunSettings> settings;
  Counts counts;
  std::optional<Accuracy> accuracy;
  std::optional<Timing> timing;
  std::optional<Rates> rates;
  Memory memory;
  std::optional<Observation> observation;
  std::optional<LayoutDump> layout;
  std::optional<Sky> sky;
  std::optional<Verification> verification;
  std::optional<Reading> reading;
  std::optional<Checkpoint> checkpoint;
  std::optional<Advice> advice;
  std::optional<Prediction> prediction;  // plan and run with --calibration
  std::optional<Device> device;  // run, degrid, grid; plan with --device=cuda
  std::optional<Pipeline> pipeline;
  std::optional<Stonewall> stonewall;
  std::optional<ImageFile> image;
  std::optional<Transit> transit;
  std::optional<Timeline> timeline;
  std::optional<Repetitions> repetitions;
  std::optional<Environment> environment;
  std::optional<Interconnect> interconnect;
  std::optional<Scaling> scaling;
};

nlohmann::json to_json(const Report& report);
std::string render_text(const Report& report);
// `iotest run` before it starts: roles, queues, memory per role and the
// data volume, from the same model.
std::string render_run_plan(const Report& report);

// The last of `runs` (repetitions of one job) with every rate of them all
// in its repetitions section.
Report with_repetitions(std::vector<Report> runs);

// A JSON report read back (`iotest scale`, `plan --rates-from`); a file that
// cannot be read or parsed is a UsageError naming `option`.
nlohmann::json read_json(const std::string& path, const std::string& option);

// The Nyx rule n x t_compute ~ t_write: the writer ranks, of
// `writers_per_rank` writers each, that keep pace with `streamers` each
// making `compute` bytes/s of chunks when one writer writes `write`
// bytes/s (report::Transit::suggested_writer_ranks); 0 without a rate.
index_t writer_ranks_for(index_t streamers, double compute, double write, int writers_per_rank);

// Pipeline::links and slow_link from Pipeline::peers and per_rank's hosts
// (kSlowLinkFraction says which link is named).
void judge_links(Pipeline& pipeline);

// A table of the report as CSV: one header row, the columns' names carrying
// their units (busy_s, bytes_written, latency_us, ...).
struct CsvTable {
  std::string name;  // written as <prefix>.<name>.csv
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

// Every table the report holds: `summary` (always: one row of the headline
// figures, the same columns for every report, so runs append into one
// sheet) and, where the report has their section, `ranks` (a row per rank of
// a run), `timeline` (per rank and interval), `repetitions` (per repetition
// and figure, the first of a series marked as its warm-up), `interconnect`
// (per pair, transport and message size), `checkpoint` (per phase and step
// of iotest h5), `read_ranks` (per rank of a read-back), `scaling` and
// `scaling_fits` (iotest scale's runs and fits). Numbers round-trip, a
// figure not measured (NaN) is empty, booleans are true or false.
std::vector<CsvTable> csv_tables(const Report& report);
// RFC 4180: fields holding a comma, a quote or a line break quoted, quotes
// doubled, lines ended by CRLF.
std::string to_csv(const CsvTable& table);
// Writes <prefix>.<name>.csv for each of csv_tables(report), each beside its
// final name and renamed into place (as write_json), and returns the paths
// written. A file that cannot be written throws std::runtime_error naming
// "--csv"; the tables written before it stay, each whole.
std::vector<std::string> write_csv(const Report& report, const std::string& prefix);

// Writes the JSON report. A regular file is written beside its final name and
// renamed into place, so a failed run never leaves a file that looks valid;
// devices and pipes (/dev/stdout) are written directly.
void write_json(const Report& report, const std::string& path);
// Checks up front that `path` can be written; throws UsageError(option).
void check_writable(const std::string& path, const std::string& option = "--report");

}  // namespace iotest::report
