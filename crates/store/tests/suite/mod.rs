mod contract;
#[cfg(feature = "postgres")]
mod postgres;
