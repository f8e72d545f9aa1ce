//! A small NATS subscriber that prints each message as the demo does (subject, headers, the
//! payload's start): `scripts/sub [-s URL] [--count N] SUBJECT`, e.g. `scripts/sub 'kube.>'`.
//! It needs nothing beyond this repository, where the `nats` CLI is a separate download.
//!
//! `-s URL` is the server (default `$NATS_URL`, else `nats://127.0.0.1:4222`); `--count N` exits
//! after N messages (default: until Ctrl-C).

#[path = "shared/message_print.rs"]
mod message_print;

use anyhow::{bail, Context as _};
use futures_util::StreamExt;

const USAGE: &str = "usage: sub [-s URL] [--count N] SUBJECT   (e.g. sub 'kube.>')";

/// What the command line asks for.
struct Args {
    server: String,
    count: Option<usize>,
    subject: String,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut server =
        std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
    let mut count = None;
    let mut subject = None;
    let mut rest = std::env::args().skip(1);
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-s" | "--server" => server = rest.next().context(USAGE)?,
            "--count" => {
                let n = rest.next().context(USAGE)?;
                count = Some(
                    n.parse()
                        .with_context(|| format!("--count {n:?}: {USAGE}"))?,
                );
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            s if s.starts_with('-') => bail!("unknown option {s:?}; {USAGE}"),
            s if subject.is_none() => subject = Some(s.to_owned()),
            _ => bail!("{USAGE}"),
        }
    }
    Ok(Args {
        server,
        count,
        subject: subject.context(USAGE)?,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let client = async_nats::connect(&args.server)
        .await
        .with_context(|| format!("connecting to {}", args.server))?;
    let mut sub = client
        .subscribe(args.subject.clone())
        .await
        .with_context(|| format!("subscribing to {}", args.subject))?;
    client.flush().await.context("subscribing")?;
    eprintln!("listening on {:?} at {}", args.subject, args.server);
    let mut seen = 0;
    loop {
        if args.count.is_some_and(|n| seen >= n) {
            return Ok(());
        }
        tokio::select! {
            msg = sub.next() => match msg {
                Some(msg) => {
                    message_print::print_message(&msg);
                    seen += 1;
                }
                None => bail!("the connection to {} closed", args.server),
            },
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}
