//! The process-wide engine is configured from the environment (one test:
//! the environment is process-wide too).

use depengine::{Engine, EngineBuilder, EngineError, EngineKind};

#[test]
fn global_engine_reads_the_environment() {
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
