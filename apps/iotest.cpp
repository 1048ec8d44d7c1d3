// The iotest executable: parses the command line and hands over to the
// library. Everything it prints comes from a report::Report. Each command,
// its options and what it does, is in apps/commands_*.cpp (commands.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_options.hpp"
#include "commands.hpp"
#include "iotest/common/errors.hpp"
#include "iotest/common/system.hpp"
#include "iotest/storage/output/unpublished.hpp"
#include "revision.hpp"  // generated: IOTEST_GIT_REVISION

namespace {

namespace cli = iotest::cli;

// SIGTERM (a batch system's time limit, scancel) or SIGINT: one line naming
// the signal and this host, then the default action, so the process ends
// at once. Files still under their temporary names stay so (.partial): a
// run ended early publishes nothing (docs/cluster.md). The lines are made
// before any signal, since a handler may only write(). Outputs that hold
// space unpublished (an object store's uploads) are taken back first, on
// a thread of its own woken through a pipe, within a bound.
char termination_lines[2][160];
int termination_pipe[2] = {-1, -1};
pid_t taker_pid = -1;  // the process whose thread takes back (not a forked writer)

[[noreturn]] void end_by(int signal) {
  std::signal(signal, SIG_DFL);
  std::raise(signal);
  std::_Exit(128 + signal);
}

extern "C" void on_termination(int signal) {
  const char* line = termination_lines[signal == SIGTERM ? 0 : 1];
  (void)!::write(STDERR_FILENO, line, std::strlen(line));
  const char which = static_cast<char>(signal);
  if (::getpid() == taker_pid && iotest::storage::any_unpublished_outputs() &&
      ::write(termination_pipe[1], &which, 1) == 1)
    return;  // the taker ends the process
  end_by(signal);
}

void take_back_on_termination() {
  if (::pipe2(termination_pipe, O_CLOEXEC) != 0) return;  // without it: ended at once
  taker_pid = ::getpid();
  std::thread([] {
    char which = 0;
    while (::read(termination_pipe[0], &which, 1) != 1)
      if (errno != EINTR) return;
    iotest::storage::drop_unpublished_outputs(std::chrono::seconds(5));
    end_by(which);
  }).detach();
}

void report_termination_signals() {
  take_back_on_termination();
  const std::string host = iotest::host_name();
  for (int i = 0; i < 2; ++i)
    std::snprintf(termination_lines[i], sizeof(termination_lines[i]),
                  "iotest: ended by %s on %s; unfinished outputs are not published\n",
                  i == 0 ? "SIGTERM" : "SIGINT", host.c_str());
  std::signal(SIGTERM, on_termination);
  std::signal(SIGINT, on_termination);
}

// The app every command is added to: its version, --config's rule, and
// the footer of its --help.
void set_up(CLI::App& app) {
  app.require_subcommand(1);
  // The version and the commit it was built from (a container's too:
  // containers/build.sh passes it as IOTEST_REVISION).
  app.set_version_flag("--version", IOTEST_VERSION " (" IOTEST_GIT_REVISION ")");
  // --config files: a key the command does not have is an error (the
  // commands inherit this).
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.footer(
      "Which command answers which question: docs/guide.md. Every command's options: "
      "iotest COMMAND --help (docs/cli.md).");
}

// The command line as typed, each word quoted where the shell would need it.
std::string quoted(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    const std::string word = argv[i];
    const bool quote = word.empty() || word.find_first_of(" \t'\"") != std::string::npos;
    line += (i ? " " : "") + (quote ? "'" + word + "'" : word);
  }
  return line;
}

// `iotest [run] ...`: without a command name, the pipeline runs ("run" is
// put into `args`). Returns the name of the command whose parse errors
// these are: "run" also for a bare `iotest`.
std::string default_to_run(const CLI::App& app, std::vector<std::string>& args) {
  if (args.size() <= 1) return "run";
  const std::string first = args[1];
  const auto commands = app.get_subcommands({});
  const bool named = first == "-h" || first == "--help" || first == "--version" ||
                     std::any_of(commands.begin(), commands.end(),
                                 [&](const CLI::App* c) { return c->get_name() == first; });
  if (!named) args.insert(args.begin() + 1, "run");
  return named ? first : "run";
}

// A parse error: one line, said by the command (under MPI, by rank 0
// alone) where it starts MPI, else here; the usage status.
int parse_failed(const std::vector<cli::Command>& commands, const std::string& name,
                 const CLI::ParseError& e) {
  // A config file's faults name --config.
  const bool config =
      dynamic_cast<const CLI::ConfigError*>(&e) || dynamic_cast<const CLI::FileError*>(&e);
  const std::string line =
      (config ? "--config: " : "") + std::string(e.what()) + " (see iotest --help)";
  for (const auto& command : commands)
    if (command.app->get_name() == name && command.parse_failed) return command.parse_failed(line);
  cli::print_error(line);
  return iotest::kExitUsage;
}

// Parses `args` (--config hoisted in front of the command): the exit
// status where there is nothing to run (help, version, a parse error).
std::optional<int> parse(CLI::App& app, std::vector<std::string>& args,
                         const std::vector<cli::Command>& commands, const std::string& name) {
  cli::hoist_config(args);
  std::vector<char*> arg_pointers;
  for (auto& a : args) arg_pointers.push_back(a.data());
  try {
    app.parse(static_cast<int>(arg_pointers.size()), arg_pointers.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return parse_failed(commands, name, e);
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  report_termination_signals();
  // A file-size limit (ulimit -f, some quotas) then fails a write with EFBIG,
  // reported like a full disk, instead of killing the process silently.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"iotest: SKA-scale radio-astronomy imaging I/O benchmark"};
  set_up(app);
  // Where every command's report goes (each has --report, --csv).
  cli::ReportOptions out;
  // In --help's order (a braced list is evaluated left to right).
  const std::vector<cli::Command> commands{
      cli::add_recombine_command(app, out), cli::add_plan_command(app, out),
      cli::add_layout_command(app, out),    cli::add_degrid_command(app, out),
      cli::add_grid_command(app, out),      cli::add_read_command(app, out),
      cli::add_h5_command(app, out),        cli::add_net_command(app, out),
      cli::add_scale_command(app, out),     cli::add_verify_command(app, out),
      cli::add_run_command(app, out)};

  cli::command_line = quoted(argc, argv);
  std::vector<std::string> args(argv, argv + argc);
  // The command whose parse errors these would be ("run" for a bare `iotest`).
  const std::string command_name = default_to_run(app, args);
  cli::enable_config(app, args.size() > 1 ? args[1] : "");
  if (const auto status = parse(app, args, commands, command_name)) return *status;
  for (const auto* command : app.get_subcommands())
    cli::configuration = cli::resolved_configuration(*command);

  if (out.report == "-") out.report = "/dev/stdout";
  for (const auto& command : commands)
    if (*command.app) return command.execute();
  return iotest::kExitOk;
}
