import Foundation
import Signet
#if canImport(Glibc)
import Glibc
#endif

/// The listening socket of `signet serve`: the one systemd passes (socket activation,
/// sd_listen_fds(3)), or one made at PATH.
enum ServiceSocket {
    /// The listening socket for `path`, and whether it was made here (and so is removed when the
    /// service ends).
    static func open(_ path: String, group: String?) throws -> (listener: SharedDescriptor, made: Bool) {
        if let passed = try activated(path) { return (passed, false) }
        return (try make(path, group: group), true)
    }

    /// The socket systemd passed, if it passed one: descriptor 3, when LISTEN_PID is this
    /// process and LISTEN_FDS is 1. It must be a listening UNIX stream socket bound to `path`
    /// (the unit and the command must name the same socket). The variables are removed so
    /// that no command the service runs takes them for its own.
    private static func activated(_ path: String) throws -> SharedDescriptor? {
        defer { for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) } }
        guard let pid = getenv("LISTEN_PID").flatMap({ pid_t(String(cString: $0)) }), pid == getpid() else { return nil }
        guard let count = getenv("LISTEN_FDS").flatMap({ Int(String(cString: $0)) }), count >= 1 else { return nil }
        guard count == 1 else { throw SignetError(.usage, "systemd passed \(count) sockets; the service takes one (one ListenStream= in its .socket unit)") }
        let fd: Int32 = 3
        var listening: Int32 = 0, domain: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0, listening == 1,
            getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &size) == 0, domain == AF_UNIX
        else { throw SignetError(.usage, "the socket systemd passed is not a listening UNIX stream socket (ListenStream=/path in the .socket unit)") }
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
        }
        let name = bound ? withUnsafeBytes(of: address.sun_path) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) } : ""
        guard name == path else {
            throw SignetError(
                .usage, "systemd passed the socket '\(name)', not --varlink unix:\(path): the unit's ListenStream= and the command must name the same path")
        }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        return SharedDescriptor(OwnedDescriptor(adopting: fd))
    }

    /// Makes the socket at `path`: mode 0660, and `group` if given. A socket left there by a
    /// service that ended is replaced; one a service still answers on, or anything that is not
    /// a socket, is refused.
    private static func make(_ path: String, group: String?) throws -> SharedDescriptor {
        let gid: gid_t? = try group.map { name in
            guard let entry = getgrnam(name) else { throw SignetError(.usage, "--group \(name): there is no such group", path: name) }
            return entry.pointee.gr_gid
        }
        var info = stat()
        if lstat(path, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFSOCK else {
                throw SignetError(.fileExists, "'\(path)' exists and is not a socket: the service will not replace it", path: path)
            }
            if let probe = try? connected(path) {
                close(probe)
                throw SignetError(.destinationBusy, "a service already answers on '\(path)'", path: path)
            }
            guard unlink(path) == 0 || errno == ENOENT else { throw SignetError.posix(errno, "cannot remove the stale socket", path: path, call: "unlink") }
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SignetError.posix(errno, "cannot make a socket", path: path, call: "socket") }
        let listener = SharedDescriptor(OwnedDescriptor(adopting: fd))
        // 0660 from the start: the file never exists with more.
        let previous = umask(0o117)
        let failure = withAddress(path) { bind(fd, $0, $1) } == 0 ? 0 : errno
        umask(previous)
        guard failure == 0 else { throw SignetError.posix(failure, "cannot make the socket", path: path, call: "bind") }
        if let gid, chown(path, uid_t.max, gid) != 0 {
            let failure = errno
            unlink(path)
            throw SignetError.posix(failure, "cannot give the socket to group \(group!)", path: path, call: "chown")
        }
        guard listen(fd, 64) == 0 else {
            let failure = errno
            unlink(path)
            throw SignetError.posix(failure, "cannot listen on the socket", path: path, call: "listen")
        }
        return listener
    }

    /// The user owning the socket file at `path`.
    static func owner(of path: String) -> uid_t? {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_uid : nil
    }

    /// A connection to `path`, if something answers there.
    private static func connected(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SignetError.posix(errno, "cannot make a socket", path: path, call: "socket") }
        guard withAddress(path, { connect(fd, $0, $1) }) == 0 else {
            let failure = errno
            close(fd)
            throw SignetError.posix(failure, "nothing answers", path: path, call: "connect")
        }
        return fd
    }

    private static func withAddress(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { bytes in
            for (i, byte) in path.utf8.prefix(bytes.count - 1).enumerated() { bytes[i] = byte }
        }
        return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
    }
}
