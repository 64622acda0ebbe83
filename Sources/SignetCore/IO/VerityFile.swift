#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetSystem
package import SystemPackage

/// The kernel's fs-verity (Documentation/filesystems/fsverity.rst), on one open
/// file: enabling it (the file becomes read-only for good, and every read of it is checked
/// against its Merkle tree; a block changed under it reads as EIO) and measuring it (the file's
/// digest from the kernel, without reading the data). SHA-256, 4,096-byte blocks, no salt:
/// the digest ``VerityDigest`` computes from the bytes, which `pack --verity` signs.
package enum VerityFile {
    /// What measuring a file found.
    package enum Measurement: Equatable, Sendable {
        /// An fs-verity file with this SHA-256 digest.
        case digest([UInt8])
        /// A file of a filesystem with fs-verity that is not an fs-verity file (ENODATA).
        case notVerity
        /// The filesystem has no fs-verity (EOPNOTSUPP, ENOTTY), or not for this file.
        case unsupported
        /// Another failure (an fs-verity file measured with another algorithm: EINVAL).
        case failed(Errno)
    }

    /// The file's fs-verity digest as the kernel keeps it.
    package static func measure(_ fd: FileDescriptor) -> Measurement {
        var digest = [UInt8](repeating: 0, count: 32)
        let result = digest.withUnsafeMutableBufferPointer { signet_measure_verity(fd.rawValue, $0.baseAddress!) }
        if result == 1 { return .digest(digest) }
        if result >= 0 { return .failed(Errno(rawValue: EINVAL)) } // another algorithm
        switch -result {
        case ENODATA: return .notVerity
        case EOPNOTSUPP, ENOTTY: return .unsupported
        case let code: return .failed(Errno(rawValue: code))
        }
    }

    /// Whether an errno from ``enable(_:)`` means the filesystem has no fs-verity (rather than
    /// a failure of this file).
    package static func isUnsupported(_ failure: SystemCallFailure) -> Bool {
        failure.code == EOPNOTSUPP || failure.code == ENOTTY
    }

    /// Makes the file an fs-verity file (the kernel reads it whole to build its Merkle tree).
    /// `fd` must be open read-only and the file open for writing nowhere (ETXTBSY). A file that
    /// already is one (EEXIST) is left as it is: measure it.
    package static func enable(_ fd: FileDescriptor) throws(SystemCallFailure) {
        while case let result = signet_enable_verity(fd.rawValue), result != 0 {
            let code = -result
            if code == EINTR { continue }
            if code == EEXIST { return }
            throw SystemCallFailure("ioctl(FS_IOC_ENABLE_VERITY)", code: code)
        }
    }
}
