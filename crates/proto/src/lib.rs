//! Generated gRPC code for every Switchyard service, and the descriptor set that feeds server
//! reflection. The `.proto` sources live in the workspace's `proto/` folder.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

/// Encoded `FileDescriptorSet` of all Switchyard protos (and their imports), for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("switchyard_descriptor");

pub mod google {
    pub mod api {
        tonic::include_proto!("google.api");
    }
}

pub mod triggers {
    pub mod v1 {
        tonic::include_proto!("switchyard.triggers.v1");
    }
}

pub mod sessions {
    pub mod v1 {
        tonic::include_proto!("switchyard.sessions.v1");
    }
}

pub mod router {
    pub mod v1 {
        tonic::include_proto!("switchyard.router.v1");
    }
}

pub mod mcp {
    pub mod v1 {
        tonic::include_proto!("switchyard.mcp.v1");
    }
}
