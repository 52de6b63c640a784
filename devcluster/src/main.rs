//! `troupe-dev`: parse the flags, run the cluster until Ctrl-C, exit with its code.

use clap::Parser;

#[tokio::main]
async fn main() {
    let config = troupe_dev::Config::parse();
    match troupe_dev::launcher::run(&config).await {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            eprintln!("troupe-dev: {error}");
            std::process::exit(2);
        }
    }
}
