// tpx-bench-check-json: validates the --json file of a tpx bench, for the bench-smoke tests.
//
//   tpx-bench-check-json collectives.json --bench collectives --keys op,size,oop_busbw
//                        --positive oop_busbw --zero oop_wrong,ip_wrong
//
// It checks the shape every bench writes (support/report.hpp): an object whose "bench" names
// the expected bench, with a "command" string, a "machine" object and a non-empty "rows"
// array of objects. Every row must have each key of --keys, every number in a row must be
// finite, each key of --positive must be a number > 0 and each key of --zero, where a row has
// it, must be 0 (a bench's count of wrong results). The first failure is printed with the row
// it is in, and the exit status is 1; 0 means the file is valid.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

using nlohmann::json;

// An empty string when the row is valid, otherwise what is wrong with it.
std::string check_row(const json& row, const std::vector<std::string>& keys,
                      const std::vector<std::string>& positive,
                      const std::vector<std::string>& zero) {
  if (!row.is_object()) return "is not an object";
  for (const std::string& key : keys)
    if (!row.contains(key)) return "lacks \"" + key + "\"";
  for (const auto& [key, value] : row.items())
    if (value.is_number() && !std::isfinite(value.get<double>()))
      return "\"" + key + "\" is not finite";
  for (const std::string& key : positive)
    if (!row.contains(key) || !row[key].is_number() || !(row[key].get<double>() > 0))
      return "\"" + key + "\" is not a number > 0";
  for (const std::string& key : zero)
    if (row.contains(key) && (!row[key].is_number() || row[key].get<double>() != 0))
      return "\"" + key + "\" is not 0";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, bench;
  std::vector<std::string> keys, positive, zero;
  CLI::App app{"tpx-bench-check-json: validate a tpx bench's --json output"};
  app.add_option("file", file, "the JSON file")->required();
  app.add_option("--bench", bench, "the bench that must have written it")->required();
  app.add_option("--keys", keys, "keys every row must have")->delimiter(',');
  app.add_option("--positive", positive, "keys that must be numbers > 0")->delimiter(',');
  app.add_option("--zero", zero, "keys that must be 0 where present")->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  const auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "tpx-bench-check-json: %s: %s\n", file.c_str(), what.c_str());
    return 1;
  };
  std::ifstream in(file);
  if (!in) return fail("cannot read it");
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return fail("not valid JSON");
  if (!doc.is_object()) return fail("not a JSON object");
  if (doc.value("bench", "") != bench) return fail("\"bench\" is not \"" + bench + "\"");
  if (!doc.contains("command") || !doc["command"].is_string()) return fail("no \"command\"");
  if (!doc.contains("machine") || !doc["machine"].is_object()) return fail("no \"machine\"");
  if (!doc.contains("rows") || !doc["rows"].is_array() || doc["rows"].empty())
    return fail("no rows");
  for (std::size_t i = 0; i < doc["rows"].size(); ++i) {
    const json& row = doc["rows"][i];
    if (const std::string problem = check_row(row, keys, positive, zero); !problem.empty())
      return fail("row " + std::to_string(i) + " " + problem + ": " + row.dump());
  }
  std::printf("tpx-bench-check-json: %s: %zu valid rows of bench %s\n", file.c_str(),
              doc["rows"].size(), bench.c_str());
  return 0;
}
