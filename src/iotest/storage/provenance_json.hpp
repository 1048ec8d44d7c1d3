// A Provenance as JSON and back, exactly (doubles as their shortest
// round-trip text): how the back-ends without HDF5 attributes keep it
// (posix's index, a MeasurementSet's table keyword).
#pragma once

#include <nlohmann/json.hpp>

#include "iotest/storage/backend.hpp"

namespace iotest::storage {

nlohmann::json provenance_json(const Provenance& pv);
// Throws nlohmann::json::exception on a malformed document.
Provenance provenance_from(const nlohmann::json& j);
nlohmann::json observation_options_json(const telescope::ObservationOptions& o);
telescope::ObservationOptions observation_options_from(const nlohmann::json& j);

}  // namespace iotest::storage
