fn main() {
    std::process::exit(fardisk::cli::main(fardisk::daemon::run_foreground));
}
