//! The process-wide engine is configured from the environment. The
//! environment is process-wide too: the tests take turns (`ENV`).

use depengine::{Engine, EngineBuilder, EngineError, EngineKind};
use std::sync::Mutex;

static ENV: Mutex<()> = Mutex::new(());

/// Takes this test's turn at the environment and clears every
/// `DEPENGINE_*` variable in it, the ones the caller of `cargo test` set
/// included (`DEPENGINE_SHUFFLE_SEED=3 cargo test` must not change what
/// these tests read), and those an earlier test left.
fn clean_env() -> std::sync::MutexGuard<'static, ()> {
    let turn = ENV.lock().unwrap_or_else(|e| e.into_inner());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("DEPENGINE_")) {
            std::env::remove_var(name);
        }
    }
    turn
}

#[test]
fn global_engine_reads_the_environment() {
    let _turn = clean_env();
    std::env::set_var("DEPENGINE_ENGINE_TYPE", "bogus");
    assert!(matches!(EngineBuilder::from_env(), Err(EngineError::Config(m)) if m.contains("bogus")));
    std::env::set_var("DEPENGINE_ENGINE_TYPE", "pooled");
    std::env::set_var("DEPENGINE_CPU_WORKERS", "3");
    std::env::set_var("DEPENGINE_SPIN_US", "x");
    assert!(matches!(EngineBuilder::from_env(), Err(EngineError::Config(m)) if m.contains("DEPENGINE_SPIN_US")));
    std::env::set_var("DEPENGINE_SPIN_US", "10");

    let engine = Engine::global();
    assert_eq!(engine.kind(), EngineKind::Pooled);
    assert_eq!(engine.cpu_workers(), 3);
    assert!(std::ptr::eq(engine, Engine::global()), "one engine per process");
    let v = engine.new_var();
    engine.push_sync(|_| {}, &[], &[v]).unwrap();
    engine.wait_var(v).unwrap();
    assert_eq!(engine.var_version(v).unwrap(), 1);
}

/// The observability variables.
#[test]
fn observability_is_configured_from_the_environment() {
    let _turn = clean_env();
    let dir = std::env::temp_dir().join(format!("depengine-env-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("env.json");
    std::env::set_var("DEPENGINE_PROFILE_EVENTS", "nope");
    assert!(matches!(EngineBuilder::from_env(), Err(EngineError::Config(m)) if m.contains("DEPENGINE_PROFILE_EVENTS")));
    std::env::set_var("DEPENGINE_PROFILE_EVENTS", "64");
    std::env::set_var("DEPENGINE_PROFILE", &path);
    std::env::set_var("DEPENGINE_HANG_REPORT_MS", "60000");
    let b = EngineBuilder::from_env().unwrap();
    std::env::remove_var("DEPENGINE_PROFILE");
    std::env::remove_var("DEPENGINE_HANG_REPORT_MS");
    std::env::remove_var("DEPENGINE_PROFILE_EVENTS");
    {
        let engine = b.cpu_workers(1).build().unwrap();
        assert!(engine.is_profiling());
        assert!(engine.pending_report(None).is_ok(), "hang diagnosis is on");
        let v = engine.new_var();
        for _ in 0..100 {
            engine.push_sync(|_| {}, &[], &[v]).unwrap();
        }
    }
    let trace = std::fs::read_to_string(&path).unwrap();
    let recorded = trace.matches("\"ph\":\"X\"").count();
    assert!(recorded > 0 && recorded <= 64 * 5, "a 64-operation ring per lane: {recorded} recorded");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The GPU ring sizes (used with the `cuda` feature): parsed and checked
/// with or without it, so a bad value is an error on every build.
#[test]
fn gpu_ring_sizes_are_read_and_checked() {
    let _turn = clean_env();
    for name in ["DEPENGINE_GPU_COMPUTE_WORKERS", "DEPENGINE_GPU_PRIORITY_WORKERS", "DEPENGINE_GPU_COPY_WORKERS"] {
        std::env::set_var(name, "two");
        assert!(matches!(EngineBuilder::from_env(), Err(EngineError::Config(m)) if m.contains(name)), "{name}");
        std::env::set_var(name, "0");
        let refused = EngineBuilder::from_env().unwrap().kind(EngineKind::Naive).build();
        let setting = name.trim_start_matches("DEPENGINE_").to_ascii_lowercase();
        assert!(matches!(&refused, Err(EngineError::Config(m)) if m.contains(&setting)), "{name}: {refused:?}");
        std::env::set_var(name, "3");
        assert!(EngineBuilder::from_env().unwrap().kind(EngineKind::Naive).build().is_ok(), "{name}");
        std::env::remove_var(name);
    }
}
