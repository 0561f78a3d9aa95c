//! A program that forgets to signal a `Completion`, and the report that
//! says so. Run: `cargo run --example hang_report`.

use depengine::{Completion, Engine, PushOpts};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn main() {
    let engine = Engine::builder().cpu_workers(2).hang_report(Duration::from_millis(200)).build().unwrap();
    let (input, output) = (engine.new_var(), engine.new_var());

    // The "load" hands its Completion to an I/O layer that loses it.
    let lost: Arc<Mutex<Option<Completion>>> = Arc::default();
    let keep = lost.clone();
    engine
        .push_async_with(move |_, done| *keep.lock().unwrap() = Some(done), &[], &[input], PushOpts::new().name("load"))
        .unwrap();
    engine.push_sync_with(|_| {}, &[input], &[output], PushOpts::new().name("decode")).unwrap();

    // This wait would hang for good; after 200 ms the engine prints what
    // it is behind (on standard error). Here a timer rescues it.
    let rescue = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        lost.lock().unwrap().take().unwrap().signal();
    });
    engine.wait_var(output).unwrap();
    rescue.join().unwrap();
    println!("the wait returned once the completion was signalled");
}
