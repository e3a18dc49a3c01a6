//! Bus overhead per message: `send` + `recv` through a module mailbox, same task and across
//! tasks. Messages are built before timing starts, so the figures are the bus's own cost.
//!
//! Run: `cargo bench -p wedge-core --bench bus`

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use wedge_core::{Bus, Content, Message};

fn messages(n: u64) -> Vec<Message> {
    let template = Message::build(
        "edgecontroller",
        "resource",
        "insert",
        "default/pod/nginx",
        Content::string("x"),
    );
    (0..n).map(|_| template.clone()).collect()
}

fn same_task(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let bus = Bus::new(1024);
    let mut mailbox = bus.register("metamanager", "meta").unwrap();
    let sender = bus.sender("metamanager").unwrap();
    let mut group = c.benchmark_group("bus");
    group.throughput(Throughput::Elements(1));
    group.bench_function("send_recv_by_name", |b| {
        b.iter_custom(|iters| {
            let batch = messages(iters);
            rt.block_on(async {
                let start = Instant::now();
                for msg in batch {
                    bus.send("metamanager", msg).await.unwrap();
                    std::hint::black_box(mailbox.recv().await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("send_recv_direct_sender", |b| {
        b.iter_custom(|iters| {
            let batch = messages(iters);
            rt.block_on(async {
                let start = Instant::now();
                for msg in batch {
                    sender.send(msg).await.unwrap();
                    std::hint::black_box(mailbox.recv().await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    group.finish();
}

fn across_tasks(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let mut group = c.benchmark_group("bus");
    group.throughput(Throughput::Elements(1));
    group.bench_function("producer_to_consumer_task", |b| {
        b.iter_custom(|iters| {
            let batch = messages(iters);
            rt.block_on(async move {
                let bus = Bus::new(1024);
                let mut mailbox = bus.register("metamanager", "meta").unwrap();
                let consumer = tokio::spawn(async move {
                    for _ in 0..iters {
                        std::hint::black_box(mailbox.recv().await.unwrap());
                    }
                });
                let start = Instant::now();
                for msg in batch {
                    bus.send("metamanager", msg).await.unwrap();
                }
                consumer.await.unwrap();
                start.elapsed()
            })
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = same_task, across_tasks
}
criterion_main!(benches);
