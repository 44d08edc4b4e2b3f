// tandem's entry point.
#include "tools/command_line.hpp"

int main(int argc, char** argv) {
  return tandem::cli::run_command_line(argc, argv);
}
