//! Rebuilds the store when a migration is added, changed or removed: `sqlx::migrate!`
//! embeds the migrations at compile time, and cargo does not otherwise watch that folder.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
