fn main() {
    println!("tinyagent");
}
