import Foundation
internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension SignetError {
    /// Maps a failed system call to an error that names the file, the next step, the call and
    /// its errno.
    package static func posix(
        _ failure: SystemCallFailure, _ action: String, path: String,
        fileID: StaticString = #fileID, line: UInt = #line
    ) -> SignetError {
        posix(failure.code, action, path: path, call: failure.call, fileID: fileID, line: line)
    }

    /// The same for whatever a system call wrapper threw: a ``SystemCallFailure`` is mapped, a
    /// `SignetError` (an interruption) passes through.
    package static func posix(
        _ error: any Error, _ action: String, path: String,
        fileID: StaticString = #fileID, line: UInt = #line
    ) -> SignetError {
        switch error {
        case let failure as SystemCallFailure: return posix(failure, action, path: path, fileID: fileID, line: line)
        case let signet as SignetError: return signet
        case let errno as Errno: return posix(errno.rawValue, action, path: path, fileID: fileID, line: line)
        default: return SignetError(.io, "\(action) '\(path)': \(error)", path: path, fileID: fileID, line: line)
        }
    }

    /// Maps an `errno` from a file operation to an error that names the file and the next step.
    package static func posix(
        _ err: Int32, _ action: String, path: String, call: String? = nil,
        fileID: StaticString = #fileID, line: UInt = #line
    ) -> SignetError {
        var error = describe(err, action, path: path, fileID: fileID, line: line)
        error.call = call
        error.systemError = err
        return error
    }

    /// The systemd service this process runs under (`signet-update@app.service`), when systemd
    /// started it (`$INVOCATION_ID` is set) and its cgroup names a `.service`; nil otherwise.
    static func systemdService(cgroupFile: String = "/proc/self/cgroup") -> String? {
        guard getenv("INVOCATION_ID") != nil,
            let bytes = try? InputFile.open(cgroupFile, what: "cgroup").readAll(limit: 64 * 1024, what: "cgroup")
        else { return nil }
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
            // "0::/system.slice/system-signet\x2dupdate.slice/signet-update@app.service"
            guard let last = line.split(separator: "/").last, last.hasSuffix(".service") else { continue }
            let unit = String(last)
            // Only a plain unit name is repeated in the message.
            guard unit.allSatisfy({ $0.isLetter || $0.isNumber || "@._-:\\".contains($0) }) else { return nil }
            return unit
        }
        return nil
    }

    private static func describe(
        _ err: Int32, _ action: String, path: String,
        fileID: StaticString, line: UInt
    ) -> SignetError {
        let text = String(cString: strerror(err))
        switch err {
        case ENOENT:
            return SignetError(
                .fileNotFound, "\(action) '\(path)': no such file; check the path",
                path: path, fileID: fileID, line: line)
        case EACCES, EPERM:
            // Making, writing or replacing something needs write permission on its folder;
            // anything else needs read permission on the file.
            let writes = [
                "cannot create", "cannot write", "cannot install", "cannot make", "cannot replace", "cannot rename",
                "cannot open the lock", "cannot remove", "cannot restore", "cannot set", "cannot finish"
            ].contains { action.hasPrefix($0) }
            let folder = (path as NSString).deletingLastPathComponent
            let hint =
                writes
                ? "check that you may write in '\(folder.isEmpty ? "." : folder)', or run as a user who may"
                : "check its permissions, or run as a user who may read it"
            return SignetError(
                .permissionDenied, "\(action) '\(path)': permission denied; \(hint)",
                path: path, fileID: fileID, line: line)
        case EROFS:
            if let unit = systemdService() {
                // Under the signet-update@ unit, ProtectSystem=strict makes every path read-only
                // except /var/lib/signet and what a drop-in adds: the real fix is the drop-in.
                let folder = (path as NSString).deletingLastPathComponent
                return SignetError(
                    .io,
                    "\(action) '\(path)': read-only for this service: \(unit) runs sandboxed (ProtectSystem=strict), where only the paths in ReadWritePaths= may be written; add the folder with a drop-in: systemctl edit \(unit), then under [Service] the line ReadWritePaths=\(folder.isEmpty ? "/" : folder)",
                    path: path, fileID: fileID, line: line)
            }
            return SignetError(
                .io, "\(action) '\(path)': the filesystem is mounted read-only; choose a path on a writable filesystem (or remount it read-write)",
                path: path, fileID: fileID, line: line)
        case EEXIST:
            return SignetError(
                .fileExists, "\(action) '\(path)': the file already exists; move it away or choose another path",
                path: path, fileID: fileID, line: line)
        case EISDIR:
            return SignetError(
                .malformedInput, "\(action) '\(path)': it is a directory, not a file",
                path: path, fileID: fileID, line: line)
        case ENOSPC, EDQUOT:
            // What was needed and what is free, the caller adds where it knows.
            return SignetError(
                .io, "\(action) '\(path)': no space left on the device\(err == EDQUOT ? " (this user's quota)" : ""); free some space and try again",
                path: path, fileID: fileID, line: line)
        default:
            return SignetError(.io, "\(action) '\(path)': \(text)", path: path, fileID: fileID, line: line)
        }
    }
}

extension SignetError {
    /// Signet's error for a Foundation file error (never Foundation's own text): the POSIX error
    /// underneath and the file it names, exit 5.
    public static func environment(_ error: NSError) -> SignetError {
        let path = (error.userInfo[NSFilePathErrorKey] as? String) ?? (error.userInfo[NSURLErrorKey] as? URL)?.path ?? "?"
        let underlying = (error.userInfo[NSUnderlyingErrorKey] as? NSError).flatMap { $0.domain == NSPOSIXErrorDomain ? Int32(exactly: $0.code) : nil }
        let code = error.domain == NSPOSIXErrorDomain ? Int32(exactly: error.code) : underlying
        switch (code, error.code) {
        case (let errno?, _): return posix(errno, "cannot use", path: path)
        case (nil, 257), (nil, 513): return posix(EACCES, "cannot use", path: path)
        case (nil, 4), (nil, 260): return posix(ENOENT, "cannot use", path: path)
        default: return SignetError(.io, "cannot use '\(path)': an I/O error occurred; check the file and try again", path: path)
        }
    }
}

extension SignetError {
    /// "1.2 MiB", "3.4 GiB": a size in a message.
    package static func size(_ bytes: UInt64) -> String {
        let units = ["bytes", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 { value /= 1024; unit += 1 }
        return unit == 0 ? "\(bytes) bytes" : String(format: "%.1f %@", value, units[unit])
    }
}
