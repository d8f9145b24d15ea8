//! The wire contract: `.proto` files and the tonic/prost code generated from them, no logic.
//!
//! Empty until the replicated groups land (issue 3: peer messages tagged with their group) and
//! the client API (issue 4: `BookingService`, `AdminService`). Nothing internal may be imported
//! here.
