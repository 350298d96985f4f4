fn main() {
    std::process::exit(fardisk::cli::main());
}
