internal import COpenSSL
internal import CSignetOpenSSL

/// OpenSSL's error queue is thread-local and sticky: clear it before an operation and drain
/// all of it after a failure, so one failure's errors never leak into the next report.
package enum OpenSSLErrorQueue {
    /// One drained entry.
    package struct Entry {
        let library: Int32
        let reason: Int32
        package let text: String
    }

    /// Empties the queue of the calling thread.
    package static func clear() {
        ERR_clear_error()
    }

    /// True when the calling thread's queue holds nothing.
    package static var isEmpty: Bool { ERR_peek_error() == 0 }

    /// Removes and returns every entry in the calling thread's queue, oldest first.
    package static func drain() -> [Entry] {
        var entries: [Entry] = []
        while true {
            var file: UnsafePointer<CChar>? = nil
            var line: Int32 = 0
            var function: UnsafePointer<CChar>? = nil
            var data: UnsafePointer<CChar>? = nil
            var flags: Int32 = 0
            let code = ERR_get_error_all(&file, &line, &function, &data, &flags)
            if code == 0 { break }
            var text = ""
            if let lib = ERR_lib_error_string(code) { text += String(cString: lib) + ": " }
            if let reason = ERR_reason_error_string(code) {
                text += String(cString: reason)
            } else {
                text += "reason \(signet_ERR_GET_REASON(code))"
            }
            if let data, (flags & ERR_TXT_STRING) != 0, data.pointee != 0 {
                text += " (" + String(cString: data) + ")"
            }
            entries.append(Entry(library: signet_ERR_GET_LIB(code), reason: signet_ERR_GET_REASON(code), text: text))
        }
        return entries
    }

    /// Drains the queue into an error.
    package static func error(
        _ code: SignetError.Code, _ reason: String, path: String? = nil,
        fileID: StaticString = #fileID, line: UInt = #line
    ) -> SignetError {
        SignetError(code, reason, path: path, openSSLErrors: drain().map(\.text), fileID: fileID, line: line)
    }
}

/// Runs `body` with a read-only memory BIO over `bytes`; the BIO does not outlive the call.
package func withMemoryBIO<R>(_ bytes: [UInt8], _ body: (OpaquePointer) throws -> R) throws -> R {
    try bytes.withUnsafeBytes { raw in
        guard let length = Int32(exactly: raw.count) else {
            throw SignetError(.malformedInput, "an input of \(raw.count) bytes is too large for OpenSSL to read")
        }
        guard let bio = BIO_new_mem_buf(raw.baseAddress, length) else {
            throw OpenSSLErrorQueue.error(.crypto, "could not allocate a memory BIO")
        }
        defer { BIO_free(bio) }
        return try body(bio)
    }
}

/// Runs `write` against a fresh writable memory BIO and returns what it wrote.
package func collectingMemoryBIO(_ write: (OpaquePointer) throws -> Void) throws -> [UInt8] {
    guard let bio = BIO_new(BIO_s_mem()) else {
        throw OpenSSLErrorQueue.error(.crypto, "could not allocate a memory BIO")
    }
    defer { BIO_free(bio) }
    try write(bio)
    var data: UnsafeMutablePointer<CChar>? = nil
    let count = signet_BIO_get_mem_data(bio, &data)
    guard count > 0, let data else { return [] }
    return data.withMemoryRebound(to: UInt8.self, capacity: count) { Array(UnsafeBufferPointer(start: $0, count: count)) }
}

/// Encodes with an OpenSSL `i2d_*` function into a Swift array (two-pass: size, then bytes).
package func derEncode(_ what: String, _ i2d: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32) throws -> [UInt8] {
    let length = i2d(nil)
    guard length > 0 else {
        throw OpenSSLErrorQueue.error(.crypto, "could not DER-encode the \(what)")
    }
    var out = [UInt8](repeating: 0, count: Int(length))
    let written = out.withUnsafeMutableBufferPointer { buffer -> Int32 in
        var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
        return i2d(&cursor)
    }
    guard written == length else {
        throw OpenSSLErrorQueue.error(.crypto, "could not DER-encode the \(what)")
    }
    return out
}
