//! Prints the kernel backend this process dispatches and what each kernel runs.
//!
//! ```text
//! cargo run -q -p eddy-kernels --example backend              # one line, for logs
//! cargo run -q -p eddy-kernels --example backend -- --kernels # one line per kernel
//! cargo run -q -p eddy-kernels --example backend -- --supported
//! ```
//!
//! The one-line form names the table and groups its kernels by the module of
//! the function they run, e.g. `avx512+vnni+vpopcntdq (avx512: dot l2sq …;
//! avx2_codes: pq_adc …)`: one backend's table may mix instruction sets. It
//! honours `EDDY_KERNELS_BACKEND` like any eddy process. `--supported` prints
//! the backends this CPU can run, best first (`avx512 avx2 scalar`), for
//! scripts that force each in turn.

use eddy_kernels::{Backend, Kernels};

fn main() {
    let arg = std::env::args().nth(1).unwrap_or_default();
    let k = Kernels::get();
    match arg.as_str() {
        "--supported" => {
            let names: Vec<&str> = Backend::ALL
                .into_iter()
                .filter(|b| b.is_supported())
                .map(Backend::as_str)
                .collect();
            println!("{}", names.join(" "));
        }
        "--kernels" => {
            println!("table {}", k.name());
            for (kernel, function) in k.implementations() {
                println!("{kernel} {function}");
            }
        }
        _ => println!("{}", summary(k)),
    }
}

/// `name (module: kernel kernel …; module: …)`, modules in first-use order.
fn summary(k: &Kernels) -> String {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for (kernel, function) in k.implementations() {
        let module = function.split("::").next().unwrap_or(function);
        match groups.iter_mut().find(|(m, _)| *m == module) {
            Some((_, kernels)) => kernels.push(kernel),
            None => groups.push((module, vec![kernel])),
        }
    }
    let groups: Vec<String> = groups
        .into_iter()
        .map(|(module, kernels)| format!("{module}: {}", kernels.join(" ")))
        .collect();
    format!("{} ({})", k.name(), groups.join("; "))
}
