//! A service on tokio that hands its heavy work to the engine: each request
//! is a task that pushes a chain of operations on typed data and awaits
//! the result, without blocking a tokio thread.
//!
//! Every request normalises a vector, scores it against a model that a
//! background task updates now and then, and formats the answer: three
//! operations, the second reading the shared model. The engine orders a
//! request's chain, and every model update with the scores around it;
//! tokio only awaits.
//!
//! ```text
//! cargo run --release --example async_service -- [REQUESTS] [CONCURRENCY]
//! ```

use depengine::{Data, Engine, EngineError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The model: a weight vector and the number of updates it has had.
struct Model {
    weights: Vec<f32>,
    version: u64,
}

const DIM: usize = 256;

/// One request: the engine runs the chain; the task awaits its end.
async fn handle(engine: &Engine, model: &Data<Model>, id: u64) -> Result<String, EngineError> {
    let input = engine.data((0..DIM).map(|i| ((i as u64 * 31 + id) % 17) as f32).collect::<Vec<f32>>());
    let score = engine.data((0.0f32, 0u64));
    let answer = engine.data(String::new());
    engine.push_data((), &input, |_, (), v| {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
        v.iter_mut().for_each(|x| *x /= norm);
    })?;
    engine.push_data((&input, model), &score, |_, (v, m), s| {
        *s = (v.iter().zip(&m.weights).map(|(a, b)| a * b).sum(), m.version);
    })?;
    engine.push_data(&score, &answer, move |_, &(s, version), a| {
        *a = format!("request {id}: score {s:.4} (model v{version})");
    })?;
    // The task sleeps until the chain's last operation has run.
    let answer = answer.read_async().await?;
    Ok(answer.clone())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), EngineError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let requests: u64 = args.first().map_or(20_000, |s| s.parse().expect("REQUESTS: a number"));
    let concurrency: usize = args.get(1).map_or(64, |s| s.parse().expect("CONCURRENCY: a number"));
    let engine = Arc::new(Engine::builder().build()?);
    let model = Arc::new(engine.data(Model { weights: vec![1.0 / DIM as f32; DIM], version: 0 }));

    // A background task updates the model; the engine orders each update
    // between the scores pushed before and after it.
    let updater = {
        let (engine, model) = (engine.clone(), model.clone());
        tokio::spawn(async move {
            for step in 1..=20u64 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                engine.push_data((), &*model, move |_, (), m| {
                    m.weights.iter_mut().enumerate().for_each(|(i, w)| *w += ((i as u64 + step) % 3) as f32 * 1e-3);
                    m.version += 1;
                })?;
            }
            Ok::<_, EngineError>(())
        })
    };

    let start = Instant::now();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = Vec::with_capacity(requests as usize);
    for id in 0..requests {
        let permit = semaphore.clone().acquire_owned().await.expect("the semaphore is never closed");
        let (engine, model) = (engine.clone(), model.clone());
        tasks.push(tokio::spawn(async move {
            let began = Instant::now();
            let answer = handle(&engine, &model, id).await;
            drop(permit);
            answer.map(|a| (a, began.elapsed()))
        }));
    }
    let mut latencies = Vec::with_capacity(tasks.len());
    let mut last = String::new();
    for task in tasks {
        let (answer, took) = task.await.expect("a request task panicked")?;
        latencies.push(took);
        last = answer;
    }
    let elapsed = start.elapsed();
    updater.await.expect("the updater panicked")?;
    engine.wait_all_async().await?;

    latencies.sort();
    let q = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    println!("{requests} requests, {concurrency} in flight, 3 engine operations each, on 2 tokio threads");
    println!(
        "  {:.0} requests/s; latency p50 {:?}, p99 {:?}",
        requests as f64 / elapsed.as_secs_f64(),
        q(0.5),
        q(0.99)
    );
    println!("  last answer: {last}");
    println!("  model updates: {}", model.read_async().await?.version);
    Ok(())
}
