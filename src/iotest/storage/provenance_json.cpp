#include "iotest/storage/provenance_json.hpp"

namespace iotest::storage {

using nlohmann::json;

json observation_options_json(const telescope::ObservationOptions& o) {
  json j;
  j["vis_set"] = o.vis_set;
  j["time"] = o.time ? json(*o.time) : json(nullptr);
  j["freq"] = o.freq ? json(*o.freq) : json(nullptr);
  j["dec_deg"] = o.dec_deg ? json(*o.dec_deg) : json(nullptr);
  return j;
}

telescope::ObservationOptions observation_options_from(const json& j) {
  telescope::ObservationOptions o;
  o.vis_set = j.at("vis_set").get<std::string>();
  if (!j.at("time").is_null()) o.time = j.at("time").get<std::string>();
  if (!j.at("freq").is_null()) o.freq = j.at("freq").get<std::string>();
  if (!j.at("dec_deg").is_null()) o.dec_deg = j.at("dec_deg").get<double>();
  return o;
}

// Every field: doubles go through JSON exactly (shortest round-trip text).
json provenance_json(const Provenance& pv) {
  json j;
  j["rec_set"] = pv.rec_set;
  j["pixel_lm"] = pv.pixel_lm;
  j["source_count"] = pv.source_count;
  j["seed"] = pv.seed;
  j["synthetic"] = pv.synthetic;
  j["observation"] = observation_options_json(pv.observation);
  j["margin"] = pv.margin;
  j["w_stack_step"] = pv.w_stack_step;
  j["stonewalled"] = pv.stonewalled;
  j["nonce"] = pv.nonce;
  j["command_line"] = pv.command_line;
  j["started"] = pv.started;
  j["host"] = pv.host;
  j["vis_units"] = pv.vis_units;
  return j;
}

Provenance provenance_from(const json& j) {
  Provenance pv;
  pv.rec_set = j.at("rec_set").get<std::string>();
  pv.pixel_lm = j.at("pixel_lm").get<double>();
  pv.source_count = j.at("source_count").get<index_t>();
  pv.seed = j.at("seed").get<std::uint64_t>();
  pv.synthetic = j.at("synthetic").get<bool>();
  pv.observation = observation_options_from(j.at("observation"));
  pv.margin = j.at("margin").get<index_t>();
  pv.w_stack_step = j.at("w_stack_step").get<double>();
  pv.stonewalled = j.at("stonewalled").get<bool>();
  pv.nonce = j.at("nonce").get<std::uint32_t>();
  // Absent in files from before the run was recorded.
  pv.command_line = j.value("command_line", "");
  pv.started = j.value("started", "");
  pv.host = j.value("host", "");
  // Absent in files from before visibilities were in Jy (1/N^2 of these):
  // provenance_of refuses a sky's.
  pv.vis_units = j.value("vis_units", "uncalib");
  return pv;
}

}  // namespace iotest::storage
