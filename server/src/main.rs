//! `troupe-server`: the control-plane binary.

fn main() -> anyhow::Result<()> {
    println!("{}", troupe_server::status_line());
    Ok(())
}
