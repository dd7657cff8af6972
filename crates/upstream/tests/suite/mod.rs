mod credentials;
mod device_flow;
mod replay;
