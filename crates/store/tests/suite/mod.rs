mod contract;
mod postgres;
