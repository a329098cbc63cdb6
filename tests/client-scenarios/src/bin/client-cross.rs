//! `client-cross`: runs the client library's cross-test scenarios against a live proxy (see the library docs).
//!
//! Usage: `client-cross --tcp URL --ws URL --wss URL --ca FILE --dead-port N`. Prints `ok <scenario>: …` lines
//! and `all scenarios passed`; exits with a panic message and a non-zero status on the first failure.

use std::process::ExitCode;

fn main() -> ExitCode {
    match moonbridge_client_scenarios::Endpoints::from_args(std::env::args().skip(1)) {
        Ok(ep) => {
            moonbridge_client_scenarios::run_all(&ep);
            println!("all scenarios passed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("client-cross: {e}\nusage: client-cross --tcp URL --ws URL --wss URL --ca FILE --dead-port N");
            ExitCode::from(2)
        }
    }
}
