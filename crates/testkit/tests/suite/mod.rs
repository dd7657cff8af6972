//! Test modules of the fake, by area.

mod openai;
mod openai_round_trip;
