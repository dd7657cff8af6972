//! Test modules of the fake, by area.

mod openai;
