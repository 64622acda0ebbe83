#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetShims

/// Extended attributes on an open file descriptor. Descriptor-based calls only: the file that
/// was opened (with O_NOFOLLOW) is the file whose attributes are read or written.
enum ExtendedAttributes {
    /// The attribute names FORMAT.md §3 defines.
    static let signature = TreeLayout.signatureAttribute
    static let metadata = TreeLayout.metadataAttribute

    /// Why an attribute call failed, as the kernel said it.
    struct Failure: Error {
        let errno: Int32
        /// The filesystem has no (user) extended attributes.
        var isUnsupported: Bool { errno == ENOTSUP || errno == EOPNOTSUPP }
        /// The value does not fit (ext4 keeps all of a file's attributes in one 4 KiB block).
        var isNoRoom: Bool { errno == E2BIG || errno == ENOSPC || errno == ERANGE }
    }

    /// Sets `name` to `value` with `fsetxattr(2)`, retrying on EINTR.
    static func set(_ name: String, _ value: [UInt8], on descriptor: Int32) -> Result<Void, Failure> {
        let status = value.withUnsafeBytes { raw in
            retryingOnEINTR { fsetxattr(descriptor, name, raw.baseAddress, raw.count, 0) }
        }
        return status == 0 ? .success(()) : .failure(Failure(errno: errno))
    }

    /// Reads `name` with `fgetxattr(2)`, growing the buffer on ERANGE; nil when absent (ENODATA).
    static func get(_ name: String, on descriptor: Int32) -> Result<[UInt8]?, Failure> {
        var capacity = 1024
        while capacity <= 1 << 16 {
            var buffer = [UInt8](repeating: 0, count: capacity)
            let count = buffer.withUnsafeMutableBytes { raw in
                retryingOnEINTR { fgetxattr(descriptor, name, raw.baseAddress, raw.count) }
            }
            if count >= 0 { return .success(Array(buffer.prefix(count))) }
            switch errno {
            case ENODATA: return .success(nil)
            case ERANGE: capacity *= 4
            default: return .failure(Failure(errno: errno))
            }
        }
        return .failure(Failure(errno: E2BIG))
    }

    /// Removes `name` with `fremovexattr(2)`; removing an absent attribute succeeds.
    static func remove(_ name: String, on descriptor: Int32) -> Result<Void, Failure> {
        if retryingOnEINTR({ fremovexattr(descriptor, name) }) == 0 || errno == ENODATA { return .success(()) }
        return .failure(Failure(errno: errno))
    }

    /// Lists attribute names with `flistxattr(2)`, growing the buffer on ERANGE.
    static func list(on descriptor: Int32) -> Result<[String], Failure> {
        var capacity = 1024
        while capacity <= 1 << 20 {
            var buffer = [UInt8](repeating: 0, count: capacity)
            let count = buffer.withUnsafeMutableBytes { raw in
                retryingOnEINTR { flistxattr(descriptor, raw.baseAddress!.assumingMemoryBound(to: CChar.self), raw.count) }
            }
            if count >= 0 {
                return .success(buffer.prefix(count).split(separator: 0).map { String(decoding: $0, as: UTF8.self) })
            }
            guard errno == ERANGE else { return .failure(Failure(errno: errno)) }
            capacity *= 4
        }
        return .failure(Failure(errno: E2BIG))
    }
}

extension ExtendedAttributes.Failure {
    /// The error FORMAT.md §4 assigns (exit 5: environment), naming the file and the attribute.
    func error(_ action: String, attribute: String, path: String) -> SignetError {
        if isUnsupported {
            return SignetError(.io, "cannot \(action) \(attribute) on '\(path)': the filesystem has no user extended attributes", path: path)
        }
        if isNoRoom {
            return SignetError(.io, "cannot \(action) \(attribute) on '\(path)': no room for the attribute (ext4 keeps all of a file's attributes in one 4 KiB block)", path: path)
        }
        return SignetError.posix(errno, "cannot \(action) \(attribute) on", path: path)
    }
}
